import { defineConfig } from 'vitest/config';

// Integration tests start real brokers; two workers suit this 2-core machine.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    maxWorkers: 2,
    reporters: ['default'],
  },
});
