import { lazy, Suspense, useCallback, useEffect, useRef, useState, type FormEvent } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { api, errorMessage, type Schemas } from "../../api/client";
import { useSession } from "../../session";
import { useRequest } from "../loading";
import { Alert } from "../parts";
import type { Preview } from "./Audience";
import { Composer } from "./Composer";
import { ConfirmDialog } from "../Confirm";
import { audienceKey, editable, emptyDraft, fromCampaign, statusLabel, toRequest, type Campaign as CampaignBody, type Draft } from "./draft";
import { ScheduleAndSend, TestSend } from "./Schedule";

// The results bring the charts library: loaded only for a campaign that has started.
const Results = lazy(() => import("./Results").then((m) => ({ default: m.Results })));

/** How often a campaign is read again while it sends (and while it waits for its time). */
const POLL_MS: Partial<Record<CampaignBody["status"], number>> = { SENDING: 2000, SCHEDULED: 15000 };

/** The page of a new campaign (no id) or of one: a fresh one for each campaign. */
export function CampaignPage() {
  const { id } = useParams();
  return <Campaign key={id ?? "new"} id={id} />;
}

/** A new campaign (no id) or one campaign: its form while it can change, its actions and results. */
function Campaign({ id }: { id?: string }) {
  const { project } = useSession();
  const navigate = useNavigate();
  const [campaign, setCampaign] = useState<CampaignBody | null>(null);
  const [draft, setDraft] = useState<Draft>(emptyDraft);
  const current = useRef(draft);
  // A save of the audience waiting for typing in the filter to pause.
  const pending = useRef<ReturnType<typeof setTimeout> | null>(null);
  const [dirty, setDirty] = useState(false);
  const [lists, setLists] = useState<{
    templates: Schemas["TemplateBody"][];
    segments: Schemas["SegmentBody"][];
    topics: Schemas["TopicBody"][];
  }>({ templates: [], segments: [], topics: [] });
  // The audience of the draft as saved (`audienceKey`): the count is of it.
  const [savedAudience, setSavedAudience] = useState<string | null>(null);
  // The save of an audience change failed: the count shown is of the draft saved before.
  const [unsaved, setUnsaved] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [saved, setSaved] = useState<string | null>(null);
  const [ask, setAsk] = useState<"cancel" | "delete" | null>(null);
  const [refresh, setRefresh] = useState(0);

  // The campaign, and what the form chooses from.
  useEffect(() => {
    if (!project) return;
    let live = true;
    void Promise.all([
      api.GET("/templates", { params: { query: { limit: 100 } } }),
      api.GET("/segments"),
      api.GET("/topics"),
    ]).then(([t, s, tp]) => {
      if (live) setLists({ templates: t.data?.data ?? [], segments: s.data ?? [], topics: tp.data ?? [] });
    });
    if (id) {
      void api.GET("/campaigns/{id}", { params: { path: { id } } }).then(({ data, error }) => {
        if (!live) return;
        setCampaign(data ?? null);
        if (data) {
          current.current = fromCampaign(data);
          setDraft(current.current);
          setSavedAudience(audienceKey(current.current));
          setDirty(false);
        }
        setError(error ? errorMessage(error) : null);
      });
    }
    return () => {
      live = false;
    };
  }, [project, id]);

  // The live count of the saved draft, again after each save (`recount`).
  const counted = campaign && editable(campaign.status) ? campaign.id : null;
  const count = useRequest(
    (signal) => (counted ? api.POST("/campaigns/{id}/audience", { params: { path: { id: counted } }, signal }) : null),
    [counted],
  );
  const recount = count.reload;

  // Read again while sending (and while scheduled, to see it start).
  const poll = campaign ? POLL_MS[campaign.status] : undefined;
  useEffect(() => {
    if (!poll || !campaign) return;
    const timer = setInterval(() => {
      void api.GET("/campaigns/{id}", { params: { path: { id: campaign.id } } }).then(({ data }) => {
        if (data) setCampaign(data);
        setRefresh((n) => n + 1);
      });
    }, poll);
    return () => clearInterval(timer);
  }, [poll, campaign]);

  /** Saves the form (creating the draft the first time); false when the API refused it. */
  const persist = useCallback(
    async (d: Draft): Promise<boolean> => {
      setSaved(null);
      if (!campaign) {
        const { data, error } = await api.POST("/campaigns", { body: toRequest(d) });
        if (error) {
          setError(errorMessage(error));
          return false;
        }
        setError(null);
        navigate(`/campaigns/${data.data.id}`, { replace: true });
        return true;
      }
      const { data, error } = await api.PUT("/campaigns/{id}", { params: { path: { id: campaign.id } }, body: toRequest(d) });
      if (error) {
        setError(errorMessage(error));
        return false;
      }
      setError(null);
      setCampaign(data);
      setSavedAudience(audienceKey(d));
      setUnsaved(false);
      recount();
      if (current.current === d) setDirty(false);
      setSaved(`Saved at ${new Date().toLocaleTimeString()}.`);
      return true;
    },
    [campaign, navigate, recount],
  );

  const save = useCallback(async () => (dirty ? persist(current.current) : true), [dirty, persist]);

  function change(patch: Partial<Draft>) {
    const next = { ...current.current, ...patch };
    const audienceChanged = audienceKey(next) !== audienceKey(current.current);
    current.current = next;
    setDraft(next);
    setDirty(true);
    // The draft is saved as the audience changes (a filter once typing pauses), so the count is
    // of what would be sent; a new campaign is counted once saved, an incomplete audience not at all.
    if (!audienceChanged || !campaign || incomplete(next)) return;
    if (pending.current) clearTimeout(pending.current);
    const wait = next.audienceType === "FILTERED" ? 600 : 0;
    pending.current = setTimeout(() => {
      void persist(current.current).then((ok) => {
        if (!ok) setUnsaved(true);
      });
    }, wait);
  }

  async function act(action: "pause" | "resume" | "cancel") {
    setAsk(null);
    if (!campaign) return;
    const path = `/campaigns/{id}/${action}` as const;
    const { data, error } = await api.POST(path, { params: { path: { id: campaign.id } } });
    if (error) setError(errorMessage(error));
    else {
      setError(null);
      setCampaign(data);
    }
  }

  async function duplicate() {
    if (!campaign) return;
    const { data, error } = await api.POST("/campaigns/{id}/duplicate", { params: { path: { id: campaign.id } } });
    if (error) setError(errorMessage(error));
    else navigate(`/campaigns/${data.id}`);
  }

  async function remove() {
    setAsk(null);
    if (!campaign) return;
    const { error } = await api.DELETE("/campaigns/{id}", { params: { path: { id: campaign.id } } });
    if (error) setError(errorMessage(error));
    else navigate("/campaigns");
  }

  function submit(e: FormEvent) {
    e.preventDefault();
    void persist(current.current);
  }

  if (id && !campaign) {
    return (
      <section>
        <h1>Campaign</h1>
        <Alert message={error} />
        {!error && <p role="status">Loading…</p>}
      </section>
    );
  }

  const status = campaign?.status ?? "DRAFT";
  const canEdit = editable(status);
  const missing = incomplete(draft);
  const shownPreview: Preview = !campaign
    ? { loading: false, data: null, error: null, note: "Save the draft to count who will receive it." }
    : missing
      ? { loading: false, data: null, error: null, note: missing }
      : {
          // A changed audience is being saved, then counted: the count shown is of the one before.
          loading: count.loading || (audienceKey(draft) !== savedAudience && !unsaved),
          data: count.data,
          error: count.error,
          note: unsaved ? "The count is of the saved draft: correct what is said above and save to count again." : undefined,
        };
  return (
    <section>
      <p>
        <Link to="/campaigns">All campaigns</Link>
      </p>
      <h1>{campaign ? campaign.name : "New campaign"}</h1>
      {campaign && (
        <>
          <p role="status" className="campaign-status">
            Status: <strong>{statusLabel[status]}</strong>
            {status === "SENDING" && ` (${campaign.recipientCount.toLocaleString()} recipients so far)`}
            {status === "FAILED" && campaign.failureReason && `: ${campaign.failureReason}`}
          </p>
          <div className="actions" role="group" aria-label="Campaign actions">
            {(status === "SENDING" || status === "SCHEDULED") && (
              <button type="button" onClick={() => void act("pause")}>
                Pause
              </button>
            )}
            {status === "PAUSED" && (
              <button type="button" onClick={() => void act("resume")}>
                Resume
              </button>
            )}
            {(status === "SENDING" || status === "SCHEDULED" || status === "PAUSED") && (
              <button type="button" className="secondary" onClick={() => setAsk("cancel")}>
                Cancel the campaign
              </button>
            )}
            <button type="button" className="secondary" onClick={() => void duplicate()}>
              Duplicate
            </button>
            {status !== "SENDING" && status !== "PAUSED" && (
              <button type="button" className="danger" onClick={() => setAsk("delete")}>
                Delete
              </button>
            )}
          </div>
        </>
      )}
      <Alert message={error} />
      {canEdit ? (
        <>
          <form onSubmit={submit} aria-label="Campaign">
            <Composer draft={draft} onChange={change} {...lists} preview={shownPreview} />
            <div className="actions">
              <button type="submit">{campaign ? "Save changes" : "Save draft"}</button>
              {campaign && <span className="hint">{dirty ? "Unsaved changes." : (saved ?? "All changes saved.")}</span>}
            </div>
          </form>
          {campaign && <TestSend campaign={campaign} save={save} />}
          {campaign && <ScheduleAndSend key={campaign.scheduledAt ?? ""} campaign={campaign} save={save} onChanged={setCampaign} />}
        </>
      ) : (
        campaign && <Summary campaign={campaign} segments={lists.segments} topics={lists.topics} />
      )}
      {campaign?.startedAt && (
        <Suspense fallback={<p role="status">Loading the results…</p>}>
          <Results campaign={campaign} refresh={refresh} />
        </Suspense>
      )}
      {ask === "cancel" && (
        <ConfirmDialog
          title="Cancel this campaign?"
          confirmLabel="Cancel the campaign"
          cancelLabel="Keep it"
          onConfirm={() => void act("cancel")}
          onCancel={() => setAsk(null)}
        >
          <p>
            {status === "SCHEDULED"
              ? "It will not be sent at its time."
              : "Emails not yet sent never will be; those already sent stay sent."}{" "}
            A cancelled campaign cannot be restarted (duplicate it to send it again).
          </p>
        </ConfirmDialog>
      )}
      {ask === "delete" && campaign && (
        <ConfirmDialog title={`Delete “${campaign.name}”?`} confirmLabel="Delete it" cancelLabel="Keep it" onConfirm={() => void remove()} onCancel={() => setAsk(null)}>
          <p>The campaign goes for good; the emails it sent stay in the activity feed.</p>
        </ConfirmDialog>
      )}
    </section>
  );
}

/** Why the form's audience cannot be counted yet, in words; `null` when it can. */
function incomplete(d: Draft): string | null {
  if (d.audienceType === "SEGMENT" && !d.segmentId) return "Choose a segment to count who will receive it.";
  if (d.audienceType === "FILTERED" && !d.filterComplete) return "Fill in every condition of the filter to count who will receive it.";
  return null;
}

/** What a campaign that can no longer change sends, and to whom. */
function Summary({ campaign: c, segments, topics }: { campaign: CampaignBody; segments: Schemas["SegmentBody"][]; topics: Schemas["TopicBody"][] }) {
  const audience =
    c.audienceType === "ALL"
      ? "All contacts"
      : c.audienceType === "SEGMENT"
        ? `The segment ${segments.find((s) => s.id === c.segmentId)?.name ?? c.segmentId ?? ""}`
        : "The contacts matching a filter";
  const topic = c.topicId ? (topics.find((t) => t.id === c.topicId)?.name ?? c.topicId) : "None";
  return (
    <dl className="facts card">
      <dt>Subject</dt>
      <dd>{c.subject}</dd>
      <dt>From</dt>
      <dd>{c.fromName ? `${c.fromName} <${c.from}>` : c.from}</dd>
      <dt>Audience</dt>
      <dd>{audience}</dd>
      <dt>Topic</dt>
      <dd>{topic}</dd>
      {c.startedAt && (
        <>
          <dt>Started</dt>
          <dd>{new Date(c.startedAt).toLocaleString()}</dd>
        </>
      )}
      {c.finishedAt && (
        <>
          <dt>Finished</dt>
          <dd>{new Date(c.finishedAt).toLocaleString()}</dd>
        </>
      )}
    </dl>
  );
}
