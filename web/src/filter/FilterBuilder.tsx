// The visual filter builder: conditions and nested groups over the project's fields, edited with
// the keyboard or the mouse, for segments and campaign audiences alike. The state logic is in
// model.ts; this file draws it.
import { useEffect, useId, useMemo, useRef, useState } from "react";
import { Alert } from "../pages/parts";
import { useFieldChoices, useFieldValues } from "./fields";
import {
  addItem,
  choiceFor,
  fromApi,
  MAX_DEPTH,
  newCondition,
  newGroup,
  numbering,
  operatorLabel,
  operatorsFor,
  placeErrors,
  removeItem,
  setField,
  setLogic,
  setOperator,
  setValue,
  toApi,
  valueKind,
  type ApiFilter,
  type DraftCondition,
  type DraftGroup,
  type FieldChoice,
  type Logic,
  type PathError,
  type Unit,
} from "./model";

export type { ApiFilter, PathError } from "./model";

type Props = {
  /** The filter (null: start a new one). */
  value: ApiFilter | null;
  /** Called with the filter after each change, and whether every condition is complete. */
  onChange: (filter: ApiFilter, complete: boolean) => void;
  /** The API's errors about the filter, paths from its root (see `splitErrors`). */
  errors?: PathError[];
  /** A segment not to offer as a field (the one being edited). */
  exclude?: string;
};

/** Edits a filter: a top group matching all or any of its conditions and groups. */
export function FilterBuilder({ value, onChange, errors = [], exclude }: Props) {
  const { fields, error } = useFieldChoices(exclude);
  const [root, setRoot] = useState<DraftGroup | null>(null);
  // The filter last sent to onChange: a different `value` comes from outside and is read anew.
  const sent = useRef<string | null>(null);
  // The control to focus after the next render (set by an edit that adds or removes a row).
  const focus = useRef<string | null>(null);
  const uid = useId();

  useEffect(() => {
    if (!fields) return;
    const text = JSON.stringify(value);
    if (root && text === sent.current) return;
    const tree = fromApi(value, fields[0]!, fields);
    const { filter, problems } = toApi(tree, fields);
    setRoot(tree);
    sent.current = JSON.stringify(filter);
    // A new filter is reported at once, so that the form holds what the builder shows.
    if (text !== sent.current) onChange(filter, problems.length === 0);
  }, [fields, value, root, onChange]);

  // After an edit that adds or removes a row, the focus goes where the work continues.
  useEffect(() => {
    if (!focus.current) return;
    document.getElementById(focus.current)?.focus();
    focus.current = null;
  });

  const numbers = useMemo(() => (root ? numbering(root) : new Map<string, number>()), [root]);
  const converted = useMemo(() => (root && fields ? toApi(root, fields) : null), [root, fields]);

  if (!fields || !root || !converted) return <p role="status">Loading the fields…</p>;

  const problems = new Map(converted.problems.map((p) => [p.id, p.message]));
  const placed = placeErrors(errors, converted.paths);

  function change(next: DraftGroup, focusId?: string) {
    const { filter, problems } = toApi(next, fields!);
    sent.current = JSON.stringify(filter);
    setRoot(next);
    if (focusId) focus.current = focusId;
    onChange(filter, problems.length === 0);
  }

  const ctx: Ctx = { uid, fields, root, numbers, problems, placed, change };
  return (
    <div className="filter-builder">
      <Alert message={error} />
      <Alert message={placed.get("")?.join(" ") ?? null} />
      <GroupView ctx={ctx} group={root} depth={1} />
    </div>
  );
}

type Ctx = {
  uid: string;
  fields: FieldChoice[];
  root: DraftGroup;
  numbers: Map<string, number>;
  problems: Map<string, string>;
  placed: Map<string, string[]>;
  change: (next: DraftGroup, focusId?: string) => void;
};

/** The id of an item's control, for focus moves. */
const controlId = (ctx: Ctx, id: string, what: string) => `${ctx.uid}-${id}-${what}`;

function GroupView({ ctx, group, depth, parent }: { ctx: Ctx; group: DraftGroup; depth: number; parent?: string }) {
  const top = depth === 1;
  const n = ctx.numbers.get(group.id);
  const suffix = top ? "" : ` to group ${n}`;
  const messages = [ctx.problems.get(group.id), ...(ctx.placed.get(group.id) ?? [])].filter(Boolean);
  const messageId = controlId(ctx, group.id, "messages");
  const first = ctx.fields[0]!;

  const body = (
    <>
      <label className="filter-logic">
        {top ? "Match" : `Group ${n}: match`}{" "}
        <select
          value={group.logic}
          onChange={(e) => ctx.change(setLogic(ctx.root, group.id, e.target.value as Logic))}
          aria-describedby={messages.length ? messageId : undefined}
        >
          <option value="AND">all of these</option>
          <option value="OR">any of these</option>
        </select>
      </label>
      {messages.length > 0 && (
        <p id={messageId} className="error">
          {messages.join(" ")}
        </p>
      )}
      <ul className="filter-items">
        {group.items.map((item, i) => (
          <li key={item.id}>
            {i > 0 && (
              <span className="filter-joint" aria-hidden="true">
                {group.logic === "AND" ? "and" : "or"}
              </span>
            )}
            {item.type === "condition" ? (
              <ConditionRow ctx={ctx} c={item} group={group} />
            ) : (
              <GroupView ctx={ctx} group={item} depth={depth + 1} parent={group.id} />
            )}
          </li>
        ))}
      </ul>
      <div className="filter-actions">
        <button
          type="button"
          id={controlId(ctx, group.id, "add")}
          onClick={() => {
            const c = newCondition(first);
            ctx.change(addItem(ctx.root, group.id, c), controlId(ctx, c.id, "field"));
          }}
        >
          Add condition{suffix}
        </button>
        <button
          type="button"
          disabled={depth >= MAX_DEPTH}
          onClick={() => {
            const g = newGroup(first, group.logic === "AND" ? "OR" : "AND");
            ctx.change(addItem(ctx.root, group.id, g), controlId(ctx, g.items[0]!.id, "field"));
          }}
        >
          Add group{suffix}
        </button>
        {!top && (
          <button
            type="button"
            className="filter-secondary"
            onClick={() => ctx.change(removeItem(ctx.root, group.id), parent && controlId(ctx, parent, "add"))}
          >
            Remove group {n}
          </button>
        )}
      </div>
    </>
  );

  if (top) return body;
  return (
    <fieldset className="filter-group">
      <legend>Group {n}</legend>
      {body}
    </fieldset>
  );
}

function ConditionRow({ ctx, c, group }: { ctx: Ctx; c: DraftCondition; group: DraftGroup }) {
  const n = ctx.numbers.get(c.id);
  const choice = choiceFor(c.field, ctx.fields);
  const vk = valueKind(c.operator, choice.kind);
  const messages = [ctx.problems.get(c.id), ...(ctx.placed.get(c.id) ?? [])].filter(Boolean);
  const messageId = controlId(ctx, c.id, "messages");
  const described = messages.length ? messageId : undefined;
  const sections = [...new Set([...ctx.fields, choice].map((f) => f.section))];
  const listed = ctx.fields.some((f) => f.field === c.field);
  const id = (what: string) => controlId(ctx, c.id, what);
  const setText = (text: string) => ctx.change(setValue(ctx.root, c.id, text));
  const suggestions = useFieldValues(vk === "text" && c.field.startsWith("data.") ? c.field : null);

  return (
    <fieldset className="filter-condition">
      <legend>Condition {n}</legend>
      <div className="filter-controls">
        <label htmlFor={id("field")}>Field</label>
        <select
          id={id("field")}
          value={c.field}
          onChange={(e) => ctx.change(setField(ctx.root, c.id, choiceFor(e.target.value, ctx.fields), ctx.fields))}
        >
          {sections.map((section) => (
            <optgroup key={section} label={section}>
              {[...ctx.fields, ...(listed ? [] : [choice])]
                .filter((f) => f.section === section)
                .map((f) => (
                  <option key={f.field} value={f.field}>
                    {f.kind === "event" ? `Did “${f.label}”` : f.label}
                  </option>
                ))}
            </optgroup>
          ))}
        </select>
        <label htmlFor={id("operator")}>Operator</label>
        <select
          id={id("operator")}
          value={c.operator}
          onChange={(e) => ctx.change(setOperator(ctx.root, c.id, e.target.value, ctx.fields))}
        >
          {operatorsFor(choice.kind).map((op) => (
            <option key={op} value={op}>
              {operatorLabel(op, choice.kind)}
            </option>
          ))}
        </select>
        {vk !== "none" && <label htmlFor={id("value")}>Value</label>}
        {vk === "boolean" && (
          <select id={id("value")} value={c.value} onChange={(e) => setText(e.target.value)} aria-describedby={described}>
            <option value="true">yes (true)</option>
            <option value="false">no (false)</option>
          </select>
        )}
        {(vk === "text" || vk === "number" || vk === "date") && (
          <input
            id={id("value")}
            type={vk === "text" ? "text" : vk}
            step={vk === "number" ? "any" : undefined}
            list={suggestions.length > 0 ? id("values") : undefined}
            value={c.value}
            onChange={(e) => setText(e.target.value)}
            aria-invalid={messages.length > 0 || undefined}
            aria-describedby={described}
          />
        )}
        {suggestions.length > 0 && (
          <datalist id={id("values")}>
            {suggestions.map((v) => (
              <option key={v} value={v} />
            ))}
          </datalist>
        )}
        {vk === "duration" && (
          <>
            <input
              id={id("value")}
              type="number"
              min="1"
              step="any"
              value={c.value}
              onChange={(e) => setText(e.target.value)}
              aria-invalid={messages.length > 0 || undefined}
              aria-describedby={described}
            />
            <label htmlFor={id("unit")}>Unit</label>
            <select
              id={id("unit")}
              value={c.unit}
              onChange={(e) => ctx.change(setValue(ctx.root, c.id, c.value, e.target.value as Unit))}
            >
              <option value="minutes">minutes</option>
              <option value="hours">hours</option>
              <option value="days">days</option>
            </select>
          </>
        )}
        <button
          type="button"
          className="filter-secondary"
          disabled={ctx.root.items.length === 1 && ctx.root.items[0] === c}
          onClick={() => ctx.change(removeItem(ctx.root, c.id), controlId(ctx, group.id, "add"))}
        >
          Remove condition {n}
        </button>
      </div>
      {messages.length > 0 && (
        <p id={messageId} className="error">
          {messages.join(" ")}
        </p>
      )}
    </fieldset>
  );
}
