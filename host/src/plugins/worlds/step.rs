//! The `step` world: looking up the plugin of a workflow step type, validating step configs and
//! running steps.

use serde_json::Value;
use tracing::instrument;

use crate::plugins::call::{call, oversize};
use crate::plugins::registry::LoadedPlugin;
use crate::plugins::types::{self, FieldError, StepInput, StepResult};
use crate::plugins::{PluginError, Plugins, World, builtin};

impl Plugins {
    /// The plugin that runs a workflow step: a built-in for the seven step types, or for
    /// `PLUGIN` the step plugin named by `config.plugin`. This is the lookup the workflow
    /// engine uses.
    pub fn step_plugin(
        &self,
        step_type: &str,
        config: &Value,
    ) -> Result<std::sync::Arc<LoadedPlugin>, PluginError> {
        if step_type == "PLUGIN" {
            let name = config
                .get("plugin")
                .and_then(Value::as_str)
                .ok_or_else(|| PluginError::NotFound("(config.plugin is not set)".into()))?;
            return self.of_world(name, World::Step);
        }
        let name = builtin::STEP_TYPES
            .iter()
            .find(|(t, _)| *t == step_type)
            .map(|(_, name)| *name)
            .ok_or_else(|| PluginError::NotFound(format!("step type {step_type}")))?;
        self.of_world(name, World::Step)
    }

    /// Validates a step config: an empty list means it is valid. For `PLUGIN`, a missing or
    /// unknown `config.plugin` is reported as a field error too.
    #[instrument(skip_all, fields(step_type = %step_type, plugin))]
    pub async fn validate_step(
        &self,
        step_type: &str,
        config: &Value,
    ) -> Result<Vec<FieldError>, PluginError> {
        if !config.is_object() {
            return Ok(vec![FieldError {
                field: "config".into(),
                message: "must be an object".into(),
            }]);
        }
        let plugin = match self.step_plugin(step_type, config) {
            Ok(plugin) => plugin,
            Err(PluginError::NotFound(_) | PluginError::WrongWorld { .. })
                if step_type == "PLUGIN" =>
            {
                return Ok(vec![FieldError {
                    field: "plugin".into(),
                    message: "must name a loaded step plugin".into(),
                }]);
            }
            Err(err) => return Err(err),
        };
        let json = config.to_string();
        let errors = call!(
            self,
            &plugin,
            Step,
            World::Step,
            herald_plugin_workflow_step.call_validate(&json)
        )?;
        let size = errors.iter().map(|e| e.field.len() + e.message.len()).sum();
        oversize(
            &plugin.info.name,
            size,
            self.runtime.settings.max_result_bytes,
        )?;
        Ok(types::field_errors(errors))
    }

    /// Runs a step once. A step's own `fail` outcome is a result, not an error.
    pub async fn run_step(
        &self,
        step_type: &str,
        input: &StepInput,
    ) -> Result<StepResult, PluginError> {
        let plugin = self.step_plugin(step_type, &input.config)?;
        self.run_step_with(&plugin, input).await
    }

    /// Runs a step plugin once.
    #[instrument(skip_all, fields(plugin))]
    pub async fn run_step_with(
        &self,
        plugin: &LoadedPlugin,
        input: &StepInput,
    ) -> Result<StepResult, PluginError> {
        let wit_input = input.to_wit();
        let result = call!(
            self,
            plugin,
            Step,
            World::Step,
            herald_plugin_workflow_step.call_run(&wit_input)
        )?;
        oversize(
            &plugin.info.name,
            types::result_size(&result),
            self.runtime.settings.max_result_bytes,
        )?;
        types::from_wit(result).map_err(|message| PluginError::MalformedResult {
            plugin: plugin.info.name.clone(),
            message,
        })
    }
}
