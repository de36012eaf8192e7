import type { ReactNode } from "react";
import type { Schemas } from "../../api/client";
import { FilterBuilder } from "../../filter/FilterBuilder";
import type { ApiFilter } from "../../filter/model";
import { exclusionWords, type AudienceType, type Draft } from "./draft";

export type Preview = { loading: boolean; data: Schemas["AudiencePreview"] | null; error: string | null; note?: string };

interface AudienceProps {
  draft: Draft;
  segments: Schemas["SegmentBody"][];
  topics: Schemas["TopicBody"][];
  onChange: (patch: Partial<Draft>) => void;
  preview: Preview;
}

interface Option {
  type: AudienceType;
  label: string;
  /** The controls that choose within the option (shown when it is chosen). */
  detail?: (p: AudienceProps) => ReactNode;
}

/**
 * Who a campaign can go to: one radio button per audience type, each with its own controls.
 * `FILTERED` (a filter built visually, web/src/filter/) is one more entry of this list.
 */
const OPTIONS: Option[] = [
  { type: "ALL", label: "All contacts" },
  {
    type: "SEGMENT",
    label: "The contacts of a segment",
    detail: ({ draft, segments, onChange }) => (
      <div className="field">
        <label htmlFor="campaign-segment">Segment</label>
        <select id="campaign-segment" value={draft.segmentId} onChange={(e) => onChange({ segmentId: e.target.value })}>
          <option value="">Choose a segment</option>
          {segments.map((s) => (
            <option key={s.id} value={s.id}>
              {s.name} ({s.type === "STATIC" ? "static" : "dynamic"}, {s.memberCount.toLocaleString()} at last count)
            </option>
          ))}
        </select>
      </div>
    ),
  },
  {
    type: "FILTERED",
    label: "The contacts matching a filter",
    // The same visual builder as segments'; the count follows once every condition is complete.
    detail: ({ draft, onChange }) => (
      <FilterBuilder
        value={(draft.audienceFilter as ApiFilter | null) ?? null}
        onChange={(filter, complete) => onChange({ audienceFilter: filter, filterComplete: complete })}
      />
    ),
  },
];

/** The audience section of the campaign form: who, the topic, and the live count. */
export function Audience(props: AudienceProps) {
  const { draft, topics, onChange, preview } = props;
  const options = OPTIONS;
  return (
    <fieldset>
      <legend>Audience</legend>
      <div role="radiogroup" aria-label="Who receives it">
        {options.map((o) => (
          <div key={o.type} className="choice">
            <label>
              <input
                type="radio"
                name="audience"
                value={o.type}
                checked={draft.audienceType === o.type}
                onChange={() => onChange({ audienceType: o.type })}
              />{" "}
              {o.label}
            </label>
            {draft.audienceType === o.type && o.detail && <div className="choice-detail">{o.detail(props)}</div>}
          </div>
        ))}
      </div>
      <div className="field">
        <label htmlFor="campaign-topic">Topic</label>
        <select
          id="campaign-topic"
          aria-describedby="campaign-topic-hint"
          value={draft.topicId}
          onChange={(e) => onChange({ topicId: e.target.value })}
        >
          <option value="">No topic</option>
          {topics.map((t) => (
            <option key={t.id} value={t.id}>
              {t.name}
            </option>
          ))}
        </select>
        <small id="campaign-topic-hint" className="hint">
          With a topic, only the audience's contacts subscribed to it receive the campaign, and its
          unsubscribe link leaves that topic only.
        </small>
      </div>
      <AudienceCount preview={preview} />
    </fieldset>
  );
}

/** How many contacts a send now would mail, and why the others would not be. */
export function AudienceCount({ preview }: { preview: Preview }) {
  const { loading, data, error, note } = preview;
  const excluded = data ? exclusionWords(data.excluded) : [];
  return (
    <div className="audience-count" role="status" aria-live="polite" aria-busy={loading}>
      {note && <p className="hint">{note}</p>}
      {error && <p className="error">{error}</p>}
      {data && (
        <>
          <p>
            <strong>
              {data.recipients.toLocaleString()} {data.recipients === 1 ? "contact" : "contacts"} will receive it
            </strong>
            {loading ? " (counting again…)" : "."}
          </p>
          {excluded.length > 0 && (
            <>
              <p>Why the others will not:</p>
              <ul className="list">
                {excluded.map((e) => (
                  <li key={e}>{e}</li>
                ))}
              </ul>
            </>
          )}
        </>
      )}
      {!data && loading && <p>Counting who will receive it…</p>}
    </div>
  );
}
