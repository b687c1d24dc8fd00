// The SASL a peer link logs in with, as rhea's client chose it for the same
// credentials: no SASL layer without a user (auth=no takes that), PLAIN only with a
// password, EXTERNAL only with a TLS client certificate, ANONYMOUS beside it when asked.
import { describe, expect, it } from 'vitest';
import { saslFor } from '../../../src/peer-link/engine-dialer.js';

const tls = { ca: 'CA', cert: 'CERT', key: 'KEY' };

describe('engine dialer - SASL as configured', () => {
  it('PLAIN: a user and a password log in by PLAIN; a user alone by ANONYMOUS; no user, no SASL', () => {
    expect(saslFor({ mechanism: 'PLAIN', user: 'ha', password: 'pw' }, undefined)).toEqual({ user: 'ha', password: 'pw', mechanisms: ['PLAIN'] });
    expect(saslFor({ mechanism: 'PLAIN', user: 'ha', password: undefined }, undefined)).toEqual({ user: 'ha', mechanisms: ['ANONYMOUS'] });
    expect(saslFor({ mechanism: 'PLAIN', user: undefined, password: 'pw' }, undefined)).toBeUndefined();
    expect(saslFor({ mechanism: 'PLAIN', user: '', password: 'pw' }, undefined)).toBeUndefined();
  });

  it('ANONYMOUS: no SASL layer', () => {
    expect(saslFor({ mechanism: 'ANONYMOUS' }, tls)).toBeUndefined();
  });

  it('EXTERNAL: the certificate over TLS, ANONYMOUS after it when allowed; nothing without a certificate', () => {
    expect(saslFor({ mechanism: 'EXTERNAL', orAnonymous: false }, tls)).toEqual({ external: true, mechanisms: ['EXTERNAL'] });
    expect(saslFor({ mechanism: 'EXTERNAL', orAnonymous: true }, tls)).toEqual({ external: true, mechanisms: ['EXTERNAL', 'ANONYMOUS'] });
    expect(saslFor({ mechanism: 'EXTERNAL', orAnonymous: true }, { ca: 'CA' })).toEqual({ external: false, mechanisms: ['ANONYMOUS'] });
    expect(saslFor({ mechanism: 'EXTERNAL', orAnonymous: false }, undefined)).toBeUndefined();
  });
});
