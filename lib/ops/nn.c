/* nn.c - placeholder until implemented. */
typedef int kiln__placeholder_nn;
