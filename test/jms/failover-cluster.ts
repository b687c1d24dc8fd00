// What each qpid-jms failover test (failover.test.ts, failover-dedup.test.ts,
// failover-features.test.ts) sets up the same way: the describe block's temp dir and
// qpid-jms classpath (jmsSuite), a 3-broker cluster with broker 0 primary and the others
// ready backups, and the `failover:` URL over all three.
import { TestCluster } from '../helpers/cluster.js';
import { jmsSuite } from './jvm.js';

export interface FailoverSuite {
  /** The qpid-jms classpath (set before all tests). */
  classpath(): string;
  /** Start 3 brokers, promote broker 0 and wait until 1 and 2 are ready backups. */
  startCluster(): Promise<TestCluster>;
}

/** Call inside a describe block, as jmsSuite: the brokers the tests start are killed after them. */
export function failoverSuite(tmpPrefix: string): FailoverSuite {
  return {
    classpath: jmsSuite(tmpPrefix),
    startCluster: () => TestCluster.ready(3, [], { readyTimeout: 60_000 }),
  };
}

/** The URL qpid-jms users write for a cluster: `failover:(amqp://127.0.0.1:p0,amqp://127.0.0.1:p1,...)`. */
export const failoverUrl = (c: TestCluster): string => `failover:(${c.ports.map((p) => `amqp://127.0.0.1:${p}`).join(',')})`;
