/**
 * Validation of block names: `<model>/<path...>`. A name reaching a metadata engine has passed here.
 */
import { NAME_COMPONENT_MAX_BYTES, NAME_MAX_BYTES, NAME_MAX_DEPTH } from './constants';
import { CascadeError } from './errors';

/** Throws EINVAL / ENAMETOOLONG; returns the components of a valid name. */
export function validateName(name: unknown): string[] {
  if (typeof name !== 'string' || name.length === 0) throw new CascadeError('EINVAL', 'name must be a non-empty string');
  if (Buffer.byteLength(name, 'utf8') > NAME_MAX_BYTES) {
    throw new CascadeError('ENAMETOOLONG', `name is over ${NAME_MAX_BYTES} bytes`);
  }
  if (name.includes('\0')) throw new CascadeError('EINVAL', 'name contains a NUL byte');
  const parts = name.split('/');
  if (parts.length < 2) throw new CascadeError('EINVAL', `name "${name}" must be <model>/<path...>`);
  if (parts.length > NAME_MAX_DEPTH) throw new CascadeError('ENAMETOOLONG', `name is deeper than ${NAME_MAX_DEPTH} components`);
  for (const part of parts) validateComponent(part, name);
  return parts;
}

/**
 * A directory below the namespace root (`<model>` or `<model>/<path...>`): its components are valid,
 * and a file can still be named inside it (at least one more one-byte component fits the limits).
 */
export function validateDirName(rel: string): void {
  const parts = rel.split('/');
  for (const part of parts) validateComponent(part, rel);
  if (Buffer.byteLength(rel, 'utf8') + 2 > NAME_MAX_BYTES || parts.length + 1 > NAME_MAX_DEPTH) {
    throw new CascadeError('ENAMETOOLONG', `directory /kv/${rel} is past the name limits (${NAME_MAX_BYTES} bytes, ${NAME_MAX_DEPTH} levels)`);
  }
}

export function validateComponent(part: string, whole: string = part): void {
  if (part.length === 0) throw new CascadeError('EINVAL', `empty component in "${whole}"`);
  if (part === '.' || part === '..') throw new CascadeError('EINVAL', `"${part}" component in "${whole}"`);
  if (part.includes('/') || part.includes('\0')) throw new CascadeError('EINVAL', `bad character in component of "${whole}"`);
  if (Buffer.byteLength(part, 'utf8') > NAME_COMPONENT_MAX_BYTES) {
    throw new CascadeError('ENAMETOOLONG', `a component is over ${NAME_COMPONENT_MAX_BYTES} bytes`);
  }
}

const SHA256_HEX = /^[0-9a-f]{64}$/;
export function validateSha256(sha256: unknown): string {
  if (typeof sha256 !== 'string' || !SHA256_HEX.test(sha256)) {
    throw new CascadeError('EINVAL', 'expected a lowercase hex SHA-256 (64 characters)');
  }
  return sha256;
}
