//! Compiled templates, shared by the sends of the same content.
//!
//! A `/v1/send` carries its subject and body (or names a stored template), and a workflow's send
//! step or a campaign names one; each is parsed into a [`CompiledTemplate`] before it renders.
//! Most senders send the same few templates again and again with other variables, so the parse
//! is kept, keyed by the project and the text itself (subject and body, compared in full, never
//! by a digest alone): a later send of the same text in the same project renders from the kept
//! one. The key is the content, not a template's id, so an edited template is a new key and
//! nothing needs to be invalidated; what is kept is a pure function of the text, so several
//! instances each keeping their own never disagree; and one project's sends never find another's
//! texts, so how fast a send is accepted says nothing of what other projects send.
//!
//! Bounded: texts over [`MAX_KEPT_BYTES`] are compiled every time (their parse dwarfs the
//! look-up's saving, and hashing them on an async worker would not be small), and what is kept
//! is counted at [`weight`] (the text, its compiled form and the entry's own bookkeeping) up to
//! [`BUDGET_BYTES`], the least used going first (moka's TinyLFU). A text that does not compile
//! is not kept; its error is returned each time.
//!
//! A text small enough ([`parse_is_small`]) is parsed on the async worker that asks (see
//! `services::cpu`); any other on the CPU pool.

use std::sync::Arc;

use crate::domain::ids::ProjectId;
use crate::domain::template::{CompiledTemplate, TemplateError};
use crate::services::cpu::{CpuPool, parse_is_small};

/// The longest subject and body, together, that is kept.
pub const MAX_KEPT_BYTES: usize = 64 * 1024;
/// What the kept templates may weigh in all, by [`weight`]: a few thousand small ones.
pub const BUDGET_BYTES: u64 = 4 * 1024 * 1024;

/// What one kept template is counted as: its text, an estimate of its compiled form (three times
/// the text) and a fixed part for the entry and the parse's own structures.
pub fn weight(subject: &str, body: &str) -> u32 {
    u32::try_from(4 * (subject.len() + body.len()) + 2048).unwrap_or(u32::MAX)
}

/// A project's subject and body as written.
type Source = (ProjectId, String, String);

/// The compiled templates kept by one instance, and the pool that compiles the others.
#[derive(Clone)]
pub struct CompiledTemplates {
    kept: moka::sync::Cache<Source, Arc<CompiledTemplate>, foldhash::fast::RandomState>,
    cpu: CpuPool,
}

impl CompiledTemplates {
    /// Templates compiled on `cpu`, kept up to [`BUDGET_BYTES`].
    pub fn new(cpu: CpuPool) -> CompiledTemplates {
        let kept = moka::sync::Cache::builder()
            .max_capacity(BUDGET_BYTES)
            .weigher(|(_, subject, body): &Source, _| weight(subject, body))
            .build_with_hasher(foldhash::fast::RandomState::default());
        CompiledTemplates { kept, cpu }
    }

    /// `subject` and `body` compiled: the kept parse of the same text in `project` when there
    /// is one, otherwise parsed on the CPU pool (and kept when small enough). The error names the
    /// field and the position.
    pub async fn compile(
        &self,
        project: &ProjectId,
        subject: String,
        body: String,
    ) -> Result<Arc<CompiledTemplate>, TemplateError> {
        if subject.len() + body.len() > MAX_KEPT_BYTES {
            return self
                .cpu
                .run(move || CompiledTemplate::compile(&subject, &body).map(Arc::new))
                .await;
        }
        let source = (project.clone(), subject, body);
        if let Some(compiled) = self.kept.get(&source) {
            return Ok(compiled);
        }
        // A small text is parsed where it is asked for.
        let small = parse_is_small(&source.1, &source.2);
        let compile = move || {
            let compiled = CompiledTemplate::compile(&source.1, &source.2).map(Arc::new);
            (source, compiled)
        };
        let (source, compiled) = if small {
            compile()
        } else {
            self.cpu.run(compile).await
        };
        let compiled = compiled?;
        self.kept.insert(source, compiled.clone());
        Ok(compiled)
    }

    /// How many compiled templates are kept (after the cache's pending bookkeeping).
    #[cfg(test)]
    fn kept(&self) -> u64 {
        self.kept.run_pending_tasks();
        self.kept.entry_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn the_same_text_of_one_project_is_compiled_once_and_renders_the_same() {
        let templates = CompiledTemplates::new(CpuPool::sized_to_cores());
        let (acme, other_project) = (ProjectId::generate(), ProjectId::generate());
        let compile = |project: &ProjectId, body: &'static str| {
            let (templates, project) = (templates.clone(), project.clone());
            async move {
                let subject = "Hi {{name}}".to_string();
                templates.compile(&project, subject, body.into()).await
            }
        };
        let first = compile(&acme, "<p>{{name}}</p>").await.unwrap();
        let again = compile(&acme, "<p>{{name}}</p>").await.unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let edited = compile(&acme, "<p>{{ name }}!</p>").await.unwrap();
        assert!(!Arc::ptr_eq(&first, &edited));
        let elsewhere = compile(&other_project, "<p>{{name}}</p>").await.unwrap();
        assert!(!Arc::ptr_eq(&first, &elsewhere));
        let vars = json!({"name": "Ada"});
        assert_eq!(again.render(&vars).unwrap().html, "<p>Ada</p>");
        assert_eq!(edited.render(&vars).unwrap().html, "<p>Ada!</p>");
        assert_eq!(elsewhere.render(&vars).unwrap().html, "<p>Ada</p>");
        assert_eq!(templates.kept(), 3);
    }

    #[tokio::test]
    async fn errors_and_large_texts_are_not_kept() {
        let templates = CompiledTemplates::new(CpuPool::sized_to_cores());
        let project = ProjectId::generate();
        let error = templates
            .compile(&project, "Hi {{name".into(), "<p></p>".into())
            .await
            .unwrap_err();
        assert_eq!(error.field, "subject");
        let large = "x".repeat(MAX_KEPT_BYTES);
        let compiled = templates
            .compile(&project, "Hi".into(), large.clone())
            .await
            .unwrap();
        assert_eq!(compiled.render(&json!({})).unwrap().html, large);
        assert_eq!(templates.kept(), 0);
    }
}
