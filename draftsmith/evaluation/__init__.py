"""The evaluation tools, built on the runtime (infer/): the benchmark behind `draftsmith bench`/`eval`,
the prompt sets (built-in, MT-Bench, HumanEval, any jsonl or `datasets` name), and the report writer
that stamps every result JSON with its machine, date, commit and command."""
