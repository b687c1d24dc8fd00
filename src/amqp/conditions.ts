// One table from what went wrong to the AMQP error condition a client sees.
import { TandemError } from '../broker/errors.js';

export interface AmqpError {
  condition: string;
  description: string;
}

export function errorCondition(err: unknown): AmqpError {
  if (err instanceof TandemError) return { condition: err.condition, description: err.message };
  const code = (err as { code?: unknown })?.code;
  if (code === 'TANDEM_ERR_DISK_FULL') {
    return { condition: 'amqp:resource-limit-exceeded', description: (err as Error).message };
  }
  if (typeof code === 'string' && code.startsWith('TANDEM_ERR_')) {
    return { condition: 'amqp:internal-error', description: (err as Error).message };
  }
  return { condition: 'amqp:internal-error', description: 'internal error; see the broker log' };
}
