/** Human sizes for the CLI: `8G`, `512M`, `64KiB`, `1.5g`, `4096`. Powers of 1024. */
import { CascadeError } from '../../store/errors';

const UNITS: Record<string, number> = { '': 1, b: 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 };

export function parseSize(text: string | number): number {
  if (typeof text === 'number') {
    if (Number.isSafeInteger(text) && text >= 0) return text;
    throw new CascadeError('EINVAL', `bad size: ${text}`);
  }
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$/i.exec(text);
  if (!m) throw new CascadeError('EINVAL', `bad size "${text}": use a number with an optional K, M, G or T suffix (e.g. 8G)`);
  const bytes = Math.floor(Number(m[1]) * UNITS[m[2].toLowerCase()]);
  if (!Number.isSafeInteger(bytes)) throw new CascadeError('EINVAL', `size "${text}" is too large`);
  return bytes;
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}
