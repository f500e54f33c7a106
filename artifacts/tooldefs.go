package artifacts

// The built-in tools, named and described as Looopy's design names them,
// with typed tools for datasets and data beside them.
type toolDef struct {
	name, desc string
	params     string // JSON Schema of the arguments
	idempotent bool
}

const idProp = `"artifactId": {"type": "string", "minLength": 1, "description": "The ID of the artifact"}`

const columnsProp = `"columns": {
      "type": "array", "minItems": 1, "maxItems": 1024,
      "description": "The dataset's columns, in order",
      "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string", "minLength": 1},
          "type": {"type": "string", "enum": ["string", "number", "integer", "boolean", "date", "json"]},
          "description": {"type": "string"}
        },
        "required": ["name", "type"],
        "additionalProperties": false
      }
    }`

var toolDefs = []toolDef{
	{
		name: "create_artifact",
		desc: "Create a new artifact to store generated content. Use this when you need to build up a response incrementally or create a file/document. " +
			"type file (default) is text built from appended chunks; data is a JSON object; dataset is a table with typed columns.",
		params: `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "description": "A descriptive name for the artifact (e.g., \"analysis_report.md\", \"data_export.json\")"},
    "description": {"type": "string", "description": "Optional description of what this artifact contains"},
    "mimeType": {"type": "string", "description": "MIME type of a file artifact's content", "enum": ["text/plain", "text/markdown", "text/html", "application/json", "text/csv"]},
    "type": {"type": "string", "enum": ["file", "data", "dataset"], "description": "The kind of artifact (default file)"},
    ` + columnsProp + `
  },
  "required": ["name"],
  "additionalProperties": false
}`,
	},
	{
		name: "append_artifact",
		desc: "Append content to an existing file artifact. Use this to build up content incrementally. The content will be added as a new part.",
		params: `{
  "type": "object",
  "properties": {
    ` + idProp + `,
    "content": {"type": "string", "description": "The content to append"},
    "isLastChunk": {"type": "boolean", "description": "Set to true if this is the final chunk of content", "default": false}
  },
  "required": ["artifactId", "content"],
  "additionalProperties": false
}`,
	},
	{
		name: "append_artifact_data",
		desc: "Append structured data to an artifact. Use this for JSON data or structured content: on a data artifact the keys are merged into its object, on a dataset the object is one row, on a file it is a line of JSON.",
		params: `{
  "type": "object",
  "properties": {
    ` + idProp + `,
    "data": {"type": "object", "description": "The structured data to append"},
    "isLastChunk": {"type": "boolean", "description": "Set to true if this is the final chunk", "default": false}
  },
  "required": ["artifactId", "data"],
  "additionalProperties": false
}`,
	},
	{
		name: "replace_artifact_part",
		desc: "Replace a specific part of a file artifact that is still being built. Use this to correct or update previously added content.",
		params: `{
  "type": "object",
  "properties": {
    ` + idProp + `,
    "partIndex": {"type": "integer", "minimum": 0, "description": "The index of the part to replace (0-based)"},
    "content": {"type": "string", "description": "The new content for this part"}
  },
  "required": ["artifactId", "partIndex", "content"],
  "additionalProperties": false
}`,
	},
	{
		name: "complete_artifact",
		desc: "Mark an artifact as complete. No more content can be added after this.",
		params: `{
  "type": "object",
  "properties": {
    ` + idProp + `
  },
  "required": ["artifactId"],
  "additionalProperties": false
}`,
	},
	{
		name:       "list_artifacts",
		desc:       "List all artifacts created during this task (or, with scope context, during the whole conversation).",
		idempotent: true,
		params: `{
  "type": "object",
  "properties": {
    "scope": {"type": "string", "enum": ["task", "context"], "default": "task"}
  },
  "additionalProperties": false
}`,
	},
	{
		name: "create_dataset",
		desc: "Create a dataset: a table whose rows are checked against named, typed columns (string, number, integer, boolean, date, json). Add rows with append_dataset_rows.",
		params: `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "description": "A descriptive name for the dataset"},
    "description": {"type": "string"},
    ` + columnsProp + `
  },
  "required": ["name", "columns"],
  "additionalProperties": false
}`,
	},
	{
		name: "append_dataset_rows",
		desc: "Append a batch of rows to a dataset. Each row is an object keyed by column name; a row that does not match the schema refuses the whole batch and names the row and column.",
		params: `{
  "type": "object",
  "properties": {
    ` + idProp + `,
    "rows": {"type": "array", "minItems": 1, "maxItems": 10000, "items": {"type": "object"}},
    "isLastBatch": {"type": "boolean", "description": "Set to true if this is the final batch", "default": false}
  },
  "required": ["artifactId", "rows"],
  "additionalProperties": false
}`,
	},
	{
		name: "write_data",
		desc: "Write a data artifact: a JSON object that replaces the previous one whole (each write is a new version). Without artifactId a new data artifact is created.",
		params: `{
  "type": "object",
  "properties": {
    "artifactId": {"type": "string", "minLength": 1, "description": "The data artifact to replace; omit to create one"},
    "name": {"type": "string", "description": "Name of a new data artifact"},
    "description": {"type": "string"},
    "data": {"type": "object", "description": "The whole object"},
    "complete": {"type": "boolean", "description": "Set to true if this is the final version", "default": false}
  },
  "required": ["data"],
  "additionalProperties": false
}`,
	},
}
