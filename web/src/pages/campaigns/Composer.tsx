import { useId, useState, type TextareaHTMLAttributes } from "react";
import type { Schemas } from "../../api/client";
import { Field } from "../parts";
import { Audience, type Preview } from "./Audience";
import { newVariant, type Draft, type Variant } from "./draft";

type TextProps = TextareaHTMLAttributes<HTMLTextAreaElement> & { label: string; hint?: string };

/** A labelled textarea, with its hint read out with it. */
function TextArea({ label, hint, ...area }: TextProps) {
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      <textarea id={id} aria-describedby={hint ? `${id}-hint` : undefined} rows={10} {...area} />
      {hint && (
        <small id={`${id}-hint`} className="hint">
          {hint}
        </small>
      )}
    </div>
  );
}

export interface ComposerProps {
  draft: Draft;
  onChange: (patch: Partial<Draft>) => void;
  templates: Schemas["TemplateBody"][];
  segments: Schemas["SegmentBody"][];
  topics: Schemas["TopicBody"][];
  preview: Preview;
}

/** The campaign form: its content (from a template or written here), sender, audience and A/B test. */
export function Composer({ draft, onChange, templates, segments, topics, preview }: ComposerProps) {
  const [template, setTemplate] = useState("");
  const [copied, setCopied] = useState<string | null>(null);

  function applyTemplate() {
    const t = templates.find((x) => x.id === template);
    if (!t) return;
    onChange({
      subject: t.subject,
      body: t.body,
      ...(t.from ? { from: t.from } : {}),
      ...(t.fromName ? { fromName: t.fromName } : {}),
      ...(t.replyTo ? { replyTo: t.replyTo } : {}),
      ...(t.topicId ? { topicId: t.topicId } : {}),
      localeVariants: t.variants,
    });
    setCopied(`The subject, body and sender of “${t.name}” are copied into the campaign; change them here as you like.`);
  }

  return (
    <>
      <Field label="Campaign name" value={draft.name} onChange={(e) => onChange({ name: e.target.value })} required />

      <fieldset>
        <legend>Content</legend>
        {templates.length > 0 && (
          <div className="inline">
            <div className="field">
              <label htmlFor="campaign-template">Start from a template</label>
              <select id="campaign-template" value={template} onChange={(e) => setTemplate(e.target.value)}>
                <option value="">Choose a template</option>
                {templates.map((t) => (
                  <option key={t.id} value={t.id}>
                    {t.name}
                  </option>
                ))}
              </select>
            </div>
            <button type="button" disabled={!template} onClick={applyTemplate}>
              Use this template
            </button>
          </div>
        )}
        {copied && <p role="status">{copied}</p>}
        <Field
          label="Subject"
          value={draft.subject}
          onChange={(e) => onChange({ subject: e.target.value })}
          hint="May use variables, such as {{ contact.data.firstName }}."
          required
        />
        <TextArea
          label="Body (HTML)"
          value={draft.body}
          onChange={(e) => onChange({ body: e.target.value })}
          hint="HTML with variables; the unsubscribe link is added for you."
          required
        />
        {Object.keys(draft.localeVariants).length > 0 && (
          <p className="hint">
            Also in: {Object.keys(draft.localeVariants).join(", ")} (each contact gets the language of its
            data.locale).
          </p>
        )}
      </fieldset>

      <fieldset>
        <legend>Sender</legend>
        <Field
          label="From address"
          type="email"
          value={draft.from}
          onChange={(e) => onChange({ from: e.target.value })}
          hint="An address on a verified domain of this project."
          required
        />
        <Field label="From name" value={draft.fromName} onChange={(e) => onChange({ fromName: e.target.value })} />
        <Field label="Reply-to address" type="email" value={draft.replyTo} onChange={(e) => onChange({ replyTo: e.target.value })} />
      </fieldset>

      <Audience draft={draft} segments={segments} topics={topics} onChange={onChange} preview={preview} />

      <AbTest draft={draft} onChange={onChange} />
    </>
  );
}

/** The A/B test: 2 to 4 variants, the test group's share, the winner's metric and the test's length. */
function AbTest({ draft, onChange }: Pick<ComposerProps, "draft" | "onChange">) {
  const setVariant = (i: number, patch: Partial<Variant>) =>
    onChange({ variants: draft.variants.map((v, j) => (j === i ? { ...v, ...patch } : v)) });
  return (
    <fieldset>
      <legend>A/B test</legend>
      <label>
        <input
          type="checkbox"
          checked={draft.abTest}
          onChange={(e) =>
            onChange({
              abTest: e.target.checked,
              variants: e.target.checked && draft.variants.length < 2 ? [newVariant(draft), newVariant(draft)] : draft.variants,
            })
          }
        />{" "}
        Test variants on part of the audience first
      </label>
      {draft.abTest && (
        <>
          <p className="hint">
            The test group is split evenly across the variants; once the test ends, the variant with the best
            rate is sent to the rest of the audience. Test sends use the campaign's own subject and body.
          </p>
          {draft.variants.map((v, i) => (
            <fieldset key={i} className="variant">
              <legend>Variant {String.fromCharCode(65 + i)}</legend>
              <Field label={`Variant ${String.fromCharCode(65 + i)} subject`} value={v.subject} onChange={(e) => setVariant(i, { subject: e.target.value })} />
              <TextArea
                label={`Variant ${String.fromCharCode(65 + i)} body (HTML)`}
                rows={6}
                value={v.body}
                onChange={(e) => setVariant(i, { body: e.target.value })}
              />
              <Field label={`Variant ${String.fromCharCode(65 + i)} from name`} value={v.fromName} onChange={(e) => setVariant(i, { fromName: e.target.value })} />
              {draft.variants.length > 2 && (
                <button type="button" className="secondary" onClick={() => onChange({ variants: draft.variants.filter((_, j) => j !== i) })}>
                  Remove variant {String.fromCharCode(65 + i)}
                </button>
              )}
            </fieldset>
          ))}
          {draft.variants.length < 4 && (
            <button type="button" className="secondary" onClick={() => onChange({ variants: [...draft.variants, newVariant(draft)] })}>
              Add a variant
            </button>
          )}
          <div className="inline">
            <Field
              label="Test group (% of the audience)"
              type="number"
              min={1}
              max={99}
              step="any"
              value={draft.testPercent}
              onChange={(e) => onChange({ testPercent: e.target.value })}
            />
            <div className="field">
              <label htmlFor="campaign-metric">Winner by</label>
              <select
                id="campaign-metric"
                value={draft.winnerMetric}
                onChange={(e) => onChange({ winnerMetric: e.target.value as Draft["winnerMetric"] })}
              >
                <option value="OPEN_RATE">Open rate</option>
                <option value="CLICK_RATE">Click rate</option>
              </select>
            </div>
            <Field
              label="Test length (hours)"
              type="number"
              min={0.01}
              max={720}
              step="any"
              value={draft.testHours}
              onChange={(e) => onChange({ testHours: e.target.value })}
            />
          </div>
        </>
      )}
    </fieldset>
  );
}
