/* matmul.cl - placeholder. */
