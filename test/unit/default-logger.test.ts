import { expect } from 'chai';
import { defaultLogger, jsonLinesLogger } from '../../middleware/default-logger.js';

describe('the default logger: pino when installed, else the same JSON lines', () => {
  const capture = (level: string): { lines: Array<Record<string, unknown>>; log: ReturnType<typeof jsonLinesLogger> } => {
    const lines: Array<Record<string, unknown>> = [];
    return { lines, log: jsonLinesLogger('fleet-ratelimit', level, (l) => lines.push(JSON.parse(l) as Record<string, unknown>)) };
  };

  it('writes pino’s fields: numeric level, time, pid, name, the fields and msg', () => {
    const { lines, log } = capture('info');
    log.warn({ keyId: 'v1:abc', code: 'RL_FORWARDED_UNTRUSTED' }, 'careful');
    expect(lines).to.have.length(1);
    expect(lines[0]).to.include({ level: 40, pid: process.pid, name: 'fleet-ratelimit', keyId: 'v1:abc', code: 'RL_FORWARDED_UNTRUSTED', msg: 'careful' });
    expect(lines[0]!.time).to.be.a('number');
  });

  it('drops lines below its level, and every line when silent', () => {
    const info = capture('info');
    info.log.debug({ keyId: 'v1:x' }, 'rate limited');
    info.log.info({}, 'policy updated');
    info.log.error({}, 'round failed');
    expect(info.lines.map((l) => l.level)).to.deep.equal([30, 50]);
    const silent = capture('silent');
    silent.log.error({}, 'round failed');
    expect(silent.lines).to.deep.equal([]);
    const unknown = capture('verbose');
    unknown.log.debug({}, 'x');
    unknown.log.info({}, 'y');
    expect(
      unknown.lines.map((l) => l.level),
      'an unknown level reads as info',
    ).to.deep.equal([30]);
  });

  it('writes an error as its type, message, code and stack', () => {
    const { lines, log } = capture('info');
    const err = Object.assign(new TypeError('boom'), { code: 'E_BOOM' });
    log.error({ err, correlationId: 'c-1' }, 'limiter fault');
    expect(lines[0]!.err).to.include({ type: 'TypeError', message: 'boom', code: 'E_BOOM' });
    expect((lines[0]!.err as { stack: string }).stack).to.include('boom');
    expect(lines[0]!.correlationId).to.equal('c-1');
  });

  it('is pino itself where pino is installed (as in this repository)', () => {
    const log = defaultLogger('fleet-ratelimit') as unknown as { child?: unknown; level?: string };
    expect(log.child).to.be.a('function');
    expect(log.level).to.equal(process.env.LOG_LEVEL ?? 'info');
  });
});
