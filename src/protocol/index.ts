// nodemailer-eml-api/protocol: the service's wire contract (request and answer bodies, headers,
// paths, scopes), for code that speaks to the service or mocks it without the client. Every name
// here is a promise to users.

export {
  API_SCOPES,
  type ApiScope,
  type ApiPlan,
  type ApiAddress,
  type ApiImage,
  type ApiTextContent,
  type EmlSendRequest,
  type StandardEmailRequest,
  type GroupEmailRequest,
  type GroupMemberEntry,
  type OnFailure,
  type AddToGroupRequest,
  type RemoveFromGroupRequest,
  type SendAcceptedResponse,
  type GroupSendAcceptedResponse,
  type AddToGroupResponse,
  type RemoveFromGroupResponse,
  type GroupCheckResponse,
  type ApiErrorCode,
  type ApiErrorBody,
} from './api-types.js';
export { API_KEY_HEADER, IDEMPOTENCY_KEY_HEADER, API_PATHS, encodePathSegment, type SendKind } from './api-types.js';
