# Entry point for `snakemake` run from the repository root; the workflow lives
# in workflow/Snakefile. Two consequences of having this file:
# - Snakemake reads the default profile from profiles/default/ (next to the
#   Snakefile it uses), where profiles/slurm/ sits beside it;
# - an included file's `default_target` does not carry over to the including
#   file, so the default target is declared here again.


include: "workflow/Snakefile"


rule default:
    input:
        rules.all.input,
    default_target: True
