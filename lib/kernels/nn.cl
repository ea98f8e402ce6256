/* nn.cl - placeholder. */
