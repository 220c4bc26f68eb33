"""Matrix products through OpenBLAS for CPU training: an op library compiled on first use
(`library`) and the rule for when it replaces `tf.matmul` (`matmul`)."""
