// badges.js: the small coloured labels the views share: request statuses,
// call and attempt states, and the reasons a request needs attention.

import {el} from "./dom.js";

// Why a listed request needs a person, in the API's order, with the words
// an operator reads on the badge and in its tooltip.
const REASONS = {
  outcome_unknown: ["outcome unknown", "a tool call's holder vanished without completing: resolve it"],
  zombie_refused: ["zombie refused", "a fenced attempt or an old holder acted and was refused"],
  terminated: ["terminated", "the stream was cut after the first delta reached the client"],
  divergence: ["divergence", "a rerun claimed a call with other arguments: the request failed"],
  duplicate_execution: ["duplicate execution", "a not_executed resolution was wrong and the key ran again: check the tool"],
};

/** One badge per reason; data-reason is the API's word, the text is for people. */
export function attentionBadges(reasons) {
  if (!Array.isArray(reasons)) return [];
  return reasons.map((reason) => {
    const known = Object.prototype.hasOwnProperty.call(REASONS, reason) ? REASONS[reason] : null;
    return el("span", {
      class: "badge" + (known ? " badge-" + reason : ""),
      "data-reason": reason,
      title: known ? known[1] : reason,
    }, known ? known[0] : String(reason));
  });
}

/**
 * A state as a pill whose colour follows the value. The class is built only
 * from values of the word shape the API uses, so data never reaches a class
 * list as anything but a harmless word.
 */
export function pill(kind, value) {
  const word = typeof value === "string" && /^[a-z_]{1,40}$/.test(value) ? value : "other";
  return el("span", {class: "pill " + kind + "-" + word}, value === null || value === undefined ? "" : String(value));
}

/** The class suffix for @value, or "other" (see pill). */
export function stateWord(value) {
  return typeof value === "string" && /^[a-z_]{1,40}$/.test(value) ? value : "other";
}

/** The code of a client_error, whether the error object or the bare code. */
export function clientErrorCode(ce) {
  if (ce === null || ce === undefined) return null;
  if (typeof ce === "string") return ce;
  if (typeof ce === "object") {
    if (ce.error && typeof ce.error.code === "string") return ce.error.code;
    if (typeof ce.code === "string") return ce.code;
  }
  return JSON.stringify(ce);
}

/** The message of a client_error object, for a tooltip. */
export function clientErrorMessage(ce) {
  if (ce && typeof ce === "object" && ce.error && typeof ce.error.message === "string") return ce.error.message;
  return null;
}
