import type { PeerCertificate } from 'node:tls';
import { describe, expect, it } from 'vitest';
import { userOfCertificate } from '../../../src/amqp/sasl-external.js';

const cert = (fields: { CN?: string | string[]; subjectaltname?: string }): PeerCertificate =>
  ({ subject: fields.CN === undefined ? {} : { CN: fields.CN }, subjectaltname: fields.subjectaltname }) as unknown as PeerCertificate;

describe('sasl external - the user a certificate names', () => {
  it('cn: the one common name; none, or two, name no one', () => {
    expect(userOfCertificate(cert({ CN: 'alice' }), 'cn')).toBe('alice');
    expect(userOfCertificate(cert({}), 'cn')).toBeUndefined();
    expect(userOfCertificate(cert({ CN: ['alice', 'admin'] }), 'cn')).toBeUndefined();
    expect(userOfCertificate(cert({ CN: '' }), 'cn')).toBeUndefined();
  });

  it('san-email: the first e-mail name, quoted values read whole, other kinds skipped', () => {
    expect(userOfCertificate(cert({ CN: 'alice', subjectaltname: 'DNS:host.example, email:alice@example.test, email:other@example.test' }), 'san-email')).toBe('alice@example.test');
    expect(userOfCertificate(cert({ subjectaltname: 'DNS:"a,b", email:"bob@example.test"' }), 'san-email')).toBe('bob@example.test');
    expect(userOfCertificate(cert({ CN: 'alice', subjectaltname: 'DNS:host.example' }), 'san-email')).toBeUndefined();
    expect(userOfCertificate(cert({ CN: 'alice' }), 'san-email')).toBeUndefined();
  });
});
