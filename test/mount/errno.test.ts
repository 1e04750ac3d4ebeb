import { strict as assert } from 'node:assert';
import { constants } from 'node:os';
import { errnoOf, ERROR_CODES, toErrno } from '../../mount/engine/errno';
import { CascadeError, type ErrorCode } from '../../store/errors';

const E = constants.errno;

/** Every member of the ErrorCode union, listed by hand so a new code shows up here too. */
const ALL_CODES: ErrorCode[] = [
  'ENOENT', 'EEXIST', 'EINVAL', 'ENAMETOOLONG', 'ENOSPC', 'EDQUOT', 'EPERM', 'EBUSY', 'EIO', 'ECORRUPT',
  'EISDIR', 'ENOTDIR', 'ENOTEMPTY', 'EBADF', 'ENODATA', 'EOPNOTSUPP', 'ERANGE', 'EFBIG', 'EACCES', 'EROFS',
  'ESTALE', 'ENFILE', 'EMFILE', 'ENOSYS',
];

function collect(): { log: (m: string) => void; lines: string[] } {
  const lines: string[] = [];
  return { log: (m) => lines.push(m), lines };
}

describe('mount/errno', () => {
  it('maps every ErrorCode to a negative integer errno', () => {
    assert.deepEqual([...ERROR_CODES].sort(), [...ALL_CODES].sort(), 'the table covers exactly the ErrorCode union');
    for (const code of ALL_CODES) {
      const errno = toErrno(new CascadeError(code, 'test'), () => {});
      assert.ok(Number.isInteger(errno) && errno < 0, `${code} -> ${errno}`);
      assert.equal(errnoOf(code), errno, code);
    }
  });

  it('maps codes whose name is an errno to that errno', () => {
    for (const code of ALL_CODES.filter((c) => c !== 'ECORRUPT')) {
      assert.equal(errnoOf(code), -(E as Record<string, number>)[code], code);
    }
  });

  it('maps the specific cases', () => {
    assert.equal(errnoOf('ECORRUPT'), -E.EIO, 'corrupt bytes are an I/O error to readers');
    assert.equal(errnoOf('EDQUOT'), -E.EDQUOT);
    assert.equal(errnoOf('EOPNOTSUPP'), -E.EOPNOTSUPP);
    assert.equal(errnoOf('ENODATA'), -E.ENODATA);
    assert.equal(errnoOf('EBUSY'), -E.EBUSY);
    assert.equal(errnoOf('ERANGE'), -E.ERANGE);
    assert.equal(errnoOf('ENOENT'), -2);
    assert.equal(errnoOf('EPERM'), -1);
  });

  it('turns anything that is not a CascadeError into -EIO and logs its stack', () => {
    const { log, lines } = collect();
    assert.equal(toErrno(new TypeError('boom in fs'), log), -E.EIO);
    assert.match(lines[0], /TypeError: boom in fs/);
    assert.match(lines[0], /\n\s+at /, 'the stack is logged');
    for (const odd of ['a string', 42, undefined, null, { code: 'ENOENT' }, Object.assign(new Error('x'), { code: 'ENOENT' })]) {
      const errno = toErrno(odd, log);
      assert.equal(errno, -E.EIO, String(odd));
    }
    assert.equal(lines.length, 7, 'each unexpected error is logged once');
  });

  it('never returns undefined, even for a code missing from the table', () => {
    const { log, lines } = collect();
    const alien = new CascadeError('ENOENT', 'x');
    (alien as { code: string }).code = 'ENOTSUP'; // what fuse-native would have answered undefined for
    assert.equal(toErrno(alien, log), -E.EIO);
    assert.match(lines[0], /unmapped error code ENOTSUP/);
    assert.equal(errnoOf('ENOTSUP' as ErrorCode), -E.EIO);
  });

  it('logs lost-data codes but not everyday misses', () => {
    const { log, lines } = collect();
    toErrno(new CascadeError('ENOENT', 'no such name'), log);
    toErrno(new CascadeError('ENODATA', 'no such attribute'), log);
    assert.equal(lines.length, 0);
    toErrno(new CascadeError('ECORRUPT', 'block abc failed its checksum'), log);
    assert.match(lines[0], /ECORRUPT: block abc/);
  });
});
