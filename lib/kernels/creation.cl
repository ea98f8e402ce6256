/* creation.cl - placeholder. */
