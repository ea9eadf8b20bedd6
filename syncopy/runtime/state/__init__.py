"""What a launch and the transports share, below both: a rank's plan (which chunks it sends, receives and
reduces, in which order), the instruction graph the plan lowers to, and the context of one operator
on one shape (buffers, signal pad, epoch) that the kernel reads and the transports fill."""
