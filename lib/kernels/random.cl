/* random.cl - placeholder. */
