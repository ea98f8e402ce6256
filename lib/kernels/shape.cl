/* shape.cl - placeholder. */
