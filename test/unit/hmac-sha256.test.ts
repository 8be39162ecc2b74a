import { expect } from 'chai';
import { createHmac } from 'node:crypto';
import { HmacSha256 } from '../../lib/hmac-sha256.js';

describe('HmacSha256: the MAC createHmac gives, with pads computed once', () => {
  const want = (key: Uint8Array, text: string): string => createHmac('sha256', key).update(text).digest('base64url');

  for (const keyBytes of [16, 64, 65, 200]) {
    it(`matches createHmac under a ${keyBytes}-byte key for texts short, growing, multi-byte and past the long-text cut`, () => {
      const key = Buffer.from(Array.from({ length: keyBytes }, (_, i) => (i * 37 + 11) & 0xff));
      const mac = new HmacSha256(key);
      const texts = ['', 'a', 'x'.repeat(55), 'x'.repeat(64), 'é€😀'.repeat(100), 'y'.repeat(16_384), 'z'.repeat(16_385), '1\nbeat\n{"b":"é"}'.repeat(7_000)];
      // Again in reverse: a long text's bytes left in the buffer would change a short one's MAC.
      for (const text of [...texts, ...texts.reverse()]) expect(mac.macBase64url(text), `${text.length} chars`).to.equal(want(key, text));
    });
  }
});
