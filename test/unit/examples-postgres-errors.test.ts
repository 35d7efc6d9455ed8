/** The PostgreSQL example's error classes, by SQLSTATE (no database needed). */
import { PermanentSinkError, TemporarySinkError } from "jetstream-inprogress";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { classifyPostgresError, postgresBatchWrite } from "../../examples/postgres-sink.js";

/** An error shaped like the ones `pg` throws for a server error response. */
function pgError(code: string, message = "server said no"): Error {
  return Object.assign(new Error(message), { code, severity: "ERROR" });
}

describe("classifyPostgresError", () => {
  it.each([
    ["22P02", "invalid input syntax (bad JSON)"],
    ["22003", "numeric value out of range"],
    ["23514", "check violation"],
    ["23502", "not-null violation"],
    ["23503", "foreign key violation"],
  ])("%s (%s) is permanent: the row is dead-lettered", (code) => {
    const cause = pgError(code);
    const error = classifyPostgresError(cause);
    expect(error).toBeInstanceOf(PermanentSinkError);
    expect(error.message).toBe(`PostgreSQL rejected the row (SQLSTATE ${code})`);
    expect(error.cause).toBe(cause);
  });

  it.each([
    ["08006", "connection failure"],
    ["08001", "cannot establish connection"],
    ["40001", "serialization failure"],
    ["40P01", "deadlock"],
    ["53300", "too many connections"],
    ["57P01", "admin shutdown"],
    ["57014", "statement cancelled"],
    ["55P03", "lock not available"],
    ["42P01", "undefined table (a deployment problem, not the message's)"],
  ])("%s (%s) is temporary: the message is retried", (code) => {
    const error = classifyPostgresError(pgError(code));
    expect(error).toBeInstanceOf(TemporarySinkError);
    expect(error.message).toContain(`SQLSTATE ${code}`);
  });

  it("network errors and unknown errors are temporary, and the message carries no row values", () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
    expect(classifyPostgresError(refused)).toBeInstanceOf(TemporarySinkError);
    expect(classifyPostgresError(refused).message).toBe("PostgreSQL unreachable or connection lost (ECONNREFUSED)");
    expect(classifyPostgresError(new Error("Connection terminated unexpectedly"))).toBeInstanceOf(TemporarySinkError);
    expect(classifyPostgresError("weird")).toBeInstanceOf(TemporarySinkError);
    const leaky = pgError("22P02", 'invalid input syntax for type integer: "card 4111-1111"');
    expect(classifyPostgresError(leaky).message).not.toContain("4111");
  });

  it("passes an already classified error through", () => {
    const p = new PermanentSinkError("bad");
    const t = new TemporarySinkError("later");
    expect(classifyPostgresError(p)).toBe(p);
    expect(classifyPostgresError(t)).toBe(t);
  });
});

describe("postgresBatchWrite", () => {
  it("refuses a table name that is not a plain identifier", () => {
    const pool = new pg.Pool({ max: 1 });
    expect(() => postgresBatchWrite({ pool, table: "events; DROP TABLE users" })).toThrow(TypeError);
    expect(() => postgresBatchWrite({ pool, table: "a.b.c" })).toThrow(/schema-qualified/);
    expect(typeof postgresBatchWrite({ pool, table: "app.events" })).toBe("function");
  });
});
