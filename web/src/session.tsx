// Who is logged in, their projects and the chosen one. Nothing secret is kept in the browser:
// the session is the HttpOnly cookie; only the chosen project's id is remembered.
import { createContext, useCallback, useContext, useEffect, useState, type ReactNode } from "react";
import { api, setProject, type Schemas } from "./api/client";

type Me = Schemas["Me"];
type Project = Schemas["ProjectBody"];

interface Session {
  loading: boolean;
  me: Me | null;
  projects: Project[];
  project: Project | null;
  choose: (id: string) => void;
  reload: () => Promise<void>;
}

const SessionContext = createContext<Session | null>(null);
const CHOSEN = "herald.project";

export function SessionProvider({ children }: { children: ReactNode }) {
  const [loading, setLoading] = useState(true);
  const [me, setMe] = useState<Me | null>(null);
  const [projects, setProjects] = useState<Project[]>([]);
  const [chosen, setChosen] = useState<string | null>(() => localStorage.getItem(CHOSEN));

  const reload = useCallback(async () => {
    const who = await api.GET("/users/@me");
    if (!who.data) {
      setMe(null);
      setProjects([]);
      setLoading(false);
      return;
    }
    const list = await api.GET("/users/@me/projects");
    setMe(who.data);
    setProjects(list.data ?? []);
    setLoading(false);
  }, []);

  useEffect(() => {
    // The first load of who is logged in; the effect syncs with the server.
    // eslint-disable-next-line react-hooks/set-state-in-effect
    void reload();
  }, [reload]);

  const project = projects.find((p) => p.id === chosen) ?? projects[0] ?? null;
  setProject(project?.id ?? null);

  const choose = useCallback((id: string) => {
    localStorage.setItem(CHOSEN, id);
    setChosen(id);
  }, []);

  return (
    <SessionContext.Provider value={{ loading, me, projects, project, choose, reload }}>
      {children}
    </SessionContext.Provider>
  );
}

export function useSession(): Session {
  const session = useContext(SessionContext);
  if (!session) throw new Error("useSession outside SessionProvider");
  return session;
}
