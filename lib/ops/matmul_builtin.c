/* matmul_builtin.c - placeholder until implemented. */
typedef int kiln__placeholder_matmul_builtin;
