# Web-search flow sizes (Alizadeh et al., DCTCP, SIGCOMM 2010), as distributed with pFabric's
# simulations: bytes and cumulative probability (sizes are multiples of 1460-byte segments).
1460 0
8760 0.15
18980 0.2
27740 0.3
48180 0.4
77380 0.53
194180 0.6
973820 0.7
1946180 0.8
4866180 0.9
9733820 0.97
29200000 1
