/**
 * Number formatting that more than one layer needs (bench gate messages and the reporters), so a
 * p-value reads the same in a table, in Markdown and in a gate verdict. Pure; imports nothing.
 */

/** A p-value: '<0.001', '0.004', '0.18', '1.00'; '-' when not finite. */
export function formatP(p: number): string {
  if (!Number.isFinite(p)) return '-';
  if (p < 0.001) return '<0.001';
  return p.toFixed(p < 0.01 ? 3 : 2);
}

/** A p-value with its relation, as printed after a difference: 'p=0.18', 'p=0.004', 'p<0.001'. */
export function formatPClause(p: number): string {
  const text = formatP(p);
  return text.startsWith('<') ? `p${text}` : `p=${text}`;
}
