import { defineConfig } from 'vitest/config';

// Integration, HA, cluster and systemd tests start real brokers, namespaces and
// daemons; on a 2-core machine they run one file at a time so that failover
// timing is the code's, not the scheduler's.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    fileParallelism: false,
    reporters: ['default'],
  },
});
