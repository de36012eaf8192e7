// The field choices of the filter builder, from the API: custom data fields with their types,
// event names, topics and segments (the built-in contact fields are in model.ts).
import { useEffect, useState } from "react";
import { api, errorMessage } from "../api/client";
import { useSession } from "../session";
import { catalogue, type FieldChoice } from "./model";

/** The project's field choices (null while loading) and the error that kept some from loading.
 * `exclude`: a segment not to offer (the one being edited: a segment cannot contain itself). */
export function useFieldChoices(exclude?: string): { fields: FieldChoice[] | null; error: string | null } {
  const { project } = useSession();
  const [fields, setFields] = useState<FieldChoice[] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    if (!project) return;
    let live = true;
    void Promise.all([api.GET("/contacts/fields"), api.GET("/events/names"), api.GET("/topics"), api.GET("/segments")]).then(
      ([f, e, t, s]) => {
        if (!live) return;
        const failed = [f, e, t, s].find((r) => r.error);
        setError(failed ? errorMessage(failed.error) : null);
        setFields(
          catalogue({
            data: (f.data?.fields ?? []).filter((x) => x.isCustom),
            events: (e.data?.names ?? []).map((n) => n.name),
            topics: t.data ?? [],
            segments: (s.data ?? []).filter((x) => x.id !== exclude),
          }),
        );
      },
    );
    return () => {
      live = false;
    };
  }, [project, exclude]);

  return { fields, error };
}

// Known values by field, read once per page load (a suggestion list, not a rule).
const known = new Map<string, Promise<string[]>>();

/** The most common values of a custom field, as text, to suggest in its value input (none for
 * `null`). */
export function useFieldValues(field: string | null): string[] {
  const { project } = useSession();
  const [values, setValues] = useState<{ field: string; list: string[] } | null>(null);

  useEffect(() => {
    if (!field || !project) return;
    const key = `${project.id} ${field}`;
    if (!known.has(key)) {
      known.set(
        key,
        api
          .GET("/contacts/fields/{field}/values", { params: { path: { field }, query: { limit: 50 } } })
          .then(({ data }) =>
            (data?.values ?? [])
              .map((v) => v.value)
              .filter((v): v is string | number => typeof v === "string" || typeof v === "number")
              .map(String),
          ),
      );
    }
    let live = true;
    void known.get(key)!.then((list) => live && setValues({ field, list }));
    return () => {
      live = false;
    };
  }, [field, project]);

  return field && values?.field === field ? values.list : [];
}
