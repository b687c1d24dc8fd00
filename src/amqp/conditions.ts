// What went wrong, as the AMQP error condition a client sees (from the error catalogue).
import { ErrorCatalogue, TandemError, isErrorCode } from '../broker/errors.js';

export interface AmqpError {
  condition: string;
  description: string;
}

export function errorCondition(err: unknown): AmqpError {
  if (err instanceof TandemError) return { condition: err.condition, description: err.message };
  const code = (err as { code?: unknown })?.code;
  // The store's own errors carry codes too (a full disk is one of the catalogue's).
  if (isErrorCode(code)) return { condition: ErrorCatalogue[code].condition, description: (err as Error).message };
  if (typeof code === 'string' && code.startsWith('TANDEM_ERR_')) {
    return { condition: ErrorCatalogue.TANDEM_ERR_INTERNAL.condition, description: (err as Error).message };
  }
  return { condition: ErrorCatalogue.TANDEM_ERR_INTERNAL.condition, description: 'internal error; see the broker log' };
}
