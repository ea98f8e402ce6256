/* reduce.cl - placeholder. */
