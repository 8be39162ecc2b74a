import type Joi from 'joi';
import type { Problem } from './errors.js';

/**
 * Runs a joi schema with every problem collected (`abortEarly: false`) and hands the list to
 * `fail`, which builds the error to throw. Returns the validated (defaulted, converted) value.
 */
export function validateWith<T>(schema: Joi.Schema, value: unknown, fail: (problems: Problem[]) => Error): T {
  const { error, value: out } = schema.validate(value, { abortEarly: false, convert: true });
  if (error) throw fail(joiProblems(error));
  return out as T;
}

/** Turns a joi error into `{path, message}` problems with dotted paths. */
export function joiProblems(error: Joi.ValidationError): Problem[] {
  return error.details.map((d) => ({
    path: d.path.length ? d.path.join('.') : '(root)',
    message: d.message.replace(/^"[^"]*" /, ''),
  }));
}
