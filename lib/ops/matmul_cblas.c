/* matmul_cblas.c - placeholder until implemented. */
typedef int kiln__placeholder_matmul_cblas;
