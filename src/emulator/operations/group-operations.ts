import {
  type AddToGroupResponse,
  isBracedPlaceholderKey,
  type GroupCheckResponse,
  type RemoveFromGroupResponse,
} from '../../protocol/api-types.js';
import { HttpError, rejectUnknownFields, type Operation, requireGroup } from './operation.js';
import { addressProblem, displayNameProblem } from '../../protocol/message-format.js';

/** Most entries in one add request. */
export const MAX_ENTRIES_PER_ADD = 1000;

interface ValidEntry {
  email: string;
  name: string | undefined;
  substitutions: Record<string, string> | undefined;
}

/** Checks one add entry. @returns the entry, or the reason it cannot be added */
function checkEntry(
  value: unknown,
  path: string,
): ValidEntry | { error: string; code: 'invalid_address' | 'invalid_request'; email: string } {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return {
      error: `${path} must be an object { "email", "name", "substitutions" }`,
      code: 'invalid_request',
      email: '',
    };
  }
  const o = value as Record<string, unknown>;
  const email = typeof o.email === 'string' ? o.email : '';
  const fail = (error: string, code: 'invalid_address' | 'invalid_request' = 'invalid_request') => ({
    error,
    code,
    email,
  });
  const unknown = Object.keys(o).find((k) => !['email', 'name', 'substitutions'].includes(k));
  if (unknown !== undefined) return fail(`${path} has an unknown field "${unknown.slice(0, 64)}"`);
  if (typeof o.email !== 'string') return fail(`${path}.email is required and must be a string`);
  const problem = addressProblem(o.email);
  if (problem) return fail(`${path}.email ${problem}: ${JSON.stringify(o.email.slice(0, 100))}`, 'invalid_address');
  if (o.name !== undefined && typeof o.name !== 'string') return fail(`${path}.name must be a string`);
  const nameProblem = o.name === undefined ? undefined : displayNameProblem(o.name);
  if (nameProblem) return fail(`${path}.name ${nameProblem}`, 'invalid_address');
  let substitutions: Record<string, string> | undefined;
  if (o.substitutions !== undefined) {
    if (typeof o.substitutions !== 'object' || o.substitutions === null || Array.isArray(o.substitutions)) {
      return fail(`${path}.substitutions must be an object of "{{key}}": "value"`);
    }
    substitutions = {};
    for (const [key, v] of Object.entries(o.substitutions as Record<string, unknown>)) {
      if (!isBracedPlaceholderKey(key)) {
        return fail(
          `${path}.substitutions key ${JSON.stringify(key.slice(0, 80))} must be written {{key}} (letters, digits, _ . -)`,
        );
      }
      if (key === '{{unsubscribe}}')
        return fail(`${path}.substitutions key {{unsubscribe}} is reserved for the unsubscribe link`);
      if (typeof v !== 'string') return fail(`${path}.substitutions ${key} must be a string`);
      substitutions[key] = v;
    }
  }
  return { email: o.email, name: o.name as string | undefined, substitutions };
}

/**
 * `POST /v1/group/{groupId}`: adds members. `onFailure: 'SKIP'` adds the valid entries and reports the others; `ABORT`
 * (the default) adds nothing when any entry is bad. Re-adding a member updates its name and substitutions.
 */
export const addToGroupOperation: Operation = {
  scopes: ['group:insert'],
  hasBody: true,
  idempotent: true,
  async handle(ctx) {
    const [groupId] = ctx.params as [string];
    requireGroup(ctx.state, groupId);
    const body = await ctx.json();
    rejectUnknownFields(body, ['entries', 'groupId', 'onFailure']);
    if (body.groupId !== undefined && body.groupId !== groupId) {
      throw new HttpError(
        400,
        'invalid_request',
        `groupId in the body (${bodyValue(body.groupId)}) differs from the path (${JSON.stringify(groupId.slice(0, 100))})`,
      );
    }
    const onFailure = body.onFailure === undefined ? 'ABORT' : body.onFailure;
    if (onFailure !== 'SKIP' && onFailure !== 'ABORT') {
      throw new HttpError(400, 'invalid_request', `onFailure must be "SKIP" or "ABORT", got ${bodyValue(onFailure)}`);
    }
    if (!Array.isArray(body.entries))
      throw new HttpError(
        400,
        'invalid_request',
        'entries is required: an array of { "email", "name", "substitutions" }',
      );
    if (body.entries.length > MAX_ENTRIES_PER_ADD) {
      throw new HttpError(
        400,
        'invalid_request',
        `entries has ${body.entries.length} items; at most ${MAX_ENTRIES_PER_ADD} per request`,
      );
    }
    const checked = body.entries.map((entry, i) => checkEntry(entry, `entries[${i}]`));
    const firstBad = checked.find((c): c is Extract<typeof c, { error: string }> => 'error' in c);
    if (firstBad && onFailure === 'ABORT') {
      throw new HttpError(400, firstBad.code, `${firstBad.error}; nothing was added (onFailure ABORT)`);
    }
    const answer: AddToGroupResponse = { added: [], skipped: [] };
    for (const entry of checked) {
      if ('error' in entry) {
        answer.skipped.push({ email: entry.email, reason: entry.error });
        continue;
      }
      ctx.state.groups.upsert(
        groupId,
        { email: entry.email, name: entry.name, substitutions: entry.substitutions ?? {} },
        ctx.now,
      );
      answer.added.push(entry.email);
    }
    return { status: 200, body: answer };
  },
};

/** `GET /v1/group/{groupId}/check/{email}`: `{ "member": true | false }`; 400 `invalid_address` for a bad address. */
export const checkGroupOperation: Operation = {
  scopes: ['group:insert', 'group:remove', 'group.sender'],
  hasBody: false,
  idempotent: false,
  handle(ctx) {
    const [groupId, email] = ctx.params as [string, string];
    requireGroup(ctx.state, groupId);
    const problem = addressProblem(email);
    if (problem)
      throw new HttpError(400, 'invalid_address', `email ${problem}: ${JSON.stringify(email.slice(0, 100))}`);
    const answer: GroupCheckResponse = { member: ctx.state.groups.isMember(groupId, email) };
    return Promise.resolve({ status: 200, body: answer });
  },
};

/** `DELETE /v1/group/{groupId}`: removes one member; 404 `not_a_member` when absent. */
export const removeFromGroupOperation: Operation = {
  scopes: ['group:remove'],
  hasBody: true,
  idempotent: false,
  async handle(ctx) {
    const [groupId] = ctx.params as [string];
    requireGroup(ctx.state, groupId);
    const body = await ctx.json();
    rejectUnknownFields(body, ['email']);
    if (typeof body.email !== 'string')
      throw new HttpError(400, 'invalid_request', 'email is required and must be a string');
    const problem = addressProblem(body.email);
    if (problem)
      throw new HttpError(400, 'invalid_address', `email ${problem}: ${JSON.stringify(body.email.slice(0, 100))}`);
    if (!ctx.state.groups.remove(groupId, body.email)) {
      throw new HttpError(404, 'not_a_member', `${body.email} is not a member of ${groupId}`);
    }
    const answer: RemoveFromGroupResponse = { removed: true };
    return { status: 200, body: answer };
  },
};

/** A value of a JSON body for an error message (`String()` of an object such as `{ "toString": null }` throws). */
function bodyValue(value: unknown): string {
  return (
    typeof value === 'string' ? JSON.stringify(value.slice(0, 100)) : (JSON.stringify(value) ?? typeof value)
  ).slice(0, 120);
}
