// Response and FinalizeResponse: what the plugin wants, as builders (mirrors
// the Rust SDK's response.rs).
import type * as wit from 'kubeplug:plugin/types@0.1.0';
import { Failed } from './errors.js';

/** A Kubernetes Event to record on the parent. */
export interface Event {
  warning: boolean;
  reason: string;
  message: string;
}

export const Event = {
  /** A `Normal` event. */
  normal: (reason: string, message: string): Event => ({ warning: false, reason, message }),
  /** A `Warning` event. */
  warning: (reason: string, message: string): Event => ({ warning: true, reason, message }),
};

/** The annotation that marks a child create-only (see wit/plugin.wit). */
export const CREATE_ONLY = 'kubeplug.io/create-only';

/** JSON text of a value the plugin returned; `Failed` if it has none. */
export function toJson(what: string, value: unknown): string {
  try {
    const text = JSON.stringify(value);
    if (text === undefined) throw new Error('not a JSON value');
    return text;
  } catch (e) {
    throw new Failed(`cannot serialize ${what}: ${(e as Error).message}`);
  }
}

/** The desired state for one parent. */
export class Response {
  private children_: string[] = [];
  private status_?: string;
  private labels: [string, string][] = [];
  private annotations: [string, string][] = [];
  private requeue?: number;
  private events_: Event[] = [];

  /** Add a desired child (an object with apiVersion, kind, metadata.name;
   * the namespace defaults to the parent's). A decorator's children are its
   * attachments, owned by the decorated object. */
  child(child: object): this {
    this.children_.push(toJson('child', child));
    return this;
  }

  /** Add a child the host creates once and never updates (generated
   * credentials...): it gets the `kubeplug.io/create-only: "true"` mark. */
  createOnlyChild(child: Record<string, any>): this {
    const value = JSON.parse(toJson('child', child));
    const meta = value?.metadata;
    if (meta === null || typeof meta !== 'object' || Array.isArray(meta)) {
      throw new Failed('a child needs metadata');
    }
    meta.annotations ??= {};
    if (typeof meta.annotations === 'object' && !Array.isArray(meta.annotations)) {
      meta.annotations[CREATE_ONLY] = 'true';
    }
    this.children_.push(JSON.stringify(value));
    return this;
  }

  /** Add a child that is already JSON text. */
  childJson(json: string): this {
    this.children_.push(json);
    return this;
  }

  /** Set the desired `.status` (composite mode: a decorator never writes
   * status). */
  status(status: object): this {
    this.status_ = toJson('status', status);
    return this;
  }

  /** Merge labels/annotations into the parent (decorator mode). */
  parentPatch(patch: { labels?: Record<string, string>; annotations?: Record<string, string> }): this {
    for (const [k, v] of Object.entries(patch.labels ?? {})) this.label(k, v);
    for (const [k, v] of Object.entries(patch.annotations ?? {})) this.annotation(k, v);
    return this;
  }

  /** Set a label on the parent (decorator mode). */
  label(key: string, value: string): this {
    this.labels.push([key, value]);
    return this;
  }

  /** Set an annotation on the parent (decorator mode). */
  annotation(key: string, value: string): this {
    this.annotations.push([key, value]);
    return this;
  }

  /** Reconcile again after `seconds` even without events. */
  requeueAfter(seconds: number): this {
    this.requeue = seconds;
    return this;
  }

  /** Record an event on the parent. */
  event(event: Event): this {
    this.events_.push(event);
    return this;
  }

  /** The desired children as JSON text (for tests). */
  get children(): readonly string[] {
    return this.children_;
  }

  toWit(): wit.Response {
    const patch =
      this.labels.length || this.annotations.length
        ? { labels: this.labels, annotations: this.annotations }
        : undefined;
    return {
      children: this.children_,
      status: this.status_,
      parentPatch: patch,
      requeueAfterSeconds: this.requeue,
      events: this.events_.map((e) => ({ ...e })),
    };
  }
}

/** The answer to `finalize`. */
export class FinalizeResponse {
  private events_: Event[] = [];
  private constructor(
    private readonly done_: boolean,
    private readonly requeue?: number,
  ) {}

  /** Cleanup is complete: the host may remove the finalizer. */
  static done(): FinalizeResponse {
    return new FinalizeResponse(true);
  }

  /** Cleanup is still running: ask again after `seconds`. */
  static pending(seconds: number): FinalizeResponse {
    return new FinalizeResponse(false, seconds);
  }

  event(event: Event): this {
    this.events_.push(event);
    return this;
  }

  toWit(): wit.FinalizeResponse {
    return {
      done: this.done_,
      requeueAfterSeconds: this.requeue,
      events: this.events_.map((e) => ({ ...e })),
    };
  }
}
