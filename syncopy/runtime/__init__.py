"""Runtime: plan -> instruction graph -> backend; contexts own buffers and signals."""
