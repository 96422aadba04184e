# Data-mining flow sizes (Greenberg et al., VL2, SIGCOMM 2009), as distributed with pFabric's
# simulations: bytes and cumulative probability (sizes are multiples of 1460-byte segments).
1460 0
1460 0.5
2920 0.6
4380 0.7
10220 0.8
389820 0.9
3076220 0.95
97333820 0.99
973333820 1
