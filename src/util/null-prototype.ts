/**
 * A table keyed by names that come from files (op types, tensor names) as a null-prototype record:
 * a node whose op type is `constructor` or `__proto__` finds no entry instead of Object's. Leaf.
 */
export function nullPrototype<T>(entries: Record<string, T>): Record<string, T> {
  return Object.assign(Object.create(null) as Record<string, T>, entries);
}
