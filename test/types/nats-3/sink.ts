/** The service's database, as far as the type check needs it. */
export interface Order {
  readonly id: string;
}

/** Inserts orders and resolves with the number of rows written. */
export async function insertOrders(orders: readonly Order[], signal?: AbortSignal): Promise<number> {
  signal?.throwIfAborted();
  return orders.length;
}
