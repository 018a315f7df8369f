import type { GroupEmailRequest, StandardEmailRequest } from '../protocol/api-types.js';
import { toApiAddress, toApiAddressList } from './address-input.js';
import type { EmailInput, GroupEmailInput } from './client-types.js';
import { toApiTextContent } from './content-input.js';
import { checkSubject } from './input-checks.js';
import { inputError } from './input-error.js';

/**
 * The body of `POST /v1/send/email` for a standard email, every field checked.
 * @param method names the call in errors, e.g. `sendEmail`
 * @throws {EmlApiError} `EMESSAGE` naming the bad field
 */
export function toStandardEmailRequest(email: EmailInput, method: string): StandardEmailRequest {
  if (typeof email !== 'object' || email === null)
    throw inputError(`${method}: expected { to, from, subject, textContent }`);
  const body: StandardEmailRequest = {
    to: toApiAddressList(email.to, `${method}: to`),
    from: toApiAddress(email.from, `${method}: from`),
    subject: checkSubject(email.subject, method),
    textContent: toApiTextContent(email.textContent, method),
  };
  if (body.to.length === 0) throw inputError(`${method}: to needs at least one recipient`);
  return body;
}

/**
 * The body of `POST /v1/send/group/{groupId}` for a group email, every field checked.
 * @throws {EmlApiError} `EMESSAGE` naming the bad field
 */
export function toGroupEmailRequest(email: GroupEmailInput, method: string): GroupEmailRequest {
  if (typeof email !== 'object' || email === null)
    throw inputError(`${method}: expected { from, subject, textContent }`);
  if ('to' in email) throw inputError(`${method}: a group email has no "to"; the recipients are the group members`);
  return {
    from: toApiAddress(email.from, `${method}: from`),
    subject: checkSubject(email.subject, method),
    textContent: toApiTextContent(email.textContent, method),
  };
}
