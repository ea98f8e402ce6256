/* matmul_clblast.c - placeholder until implemented. */
typedef int kiln__placeholder_matmul_clblast;
