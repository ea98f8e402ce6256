/* elementwise.cl - placeholder. */
