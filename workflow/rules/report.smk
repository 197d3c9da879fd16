# Report: every run's metrics and summary, the calibration and the variance
# analysis -> results/report/: index.html (figures embedded), summary.csv (one
# row per run and seed), curves.csv (perplexity per round), claims.json (the paper's claims with verdicts) and
# figures/*.png. Light work, so it runs where Snakemake runs, never as a
# cluster job.


localrules:
    report,


rule report:
    input:
        summaries=run_summaries(),
        metrics=run_metrics(),
        calibration=calibration_files(),
        variance=rules.variance.output,
    output:
        html=report(
            "results/report/index.html",
            caption="../report/summary.rst",
            category="Report",
        ),
        summary=report(
            "results/report/summary.csv",
            caption="../report/summary.rst",
            category="Report",
        ),
        curves=report(
            "results/report/curves.csv",
            caption="../report/perplexity.rst",
            category="Report",
        ),
        claims=report(
            "results/report/claims.json",
            caption="../report/summary.rst",
            category="Report",
        ),
        # A figure without data is left out, hence a folder, not a file list.
        figures=report(
            directory("results/report/figures"),
            patterns=["{name}.png"],
            caption="../report/perplexity.rst",
            category="Report",
            labels={"figure": "{name}"},
        ),
    params:
        config=config_file,
        settings=stage_params("report"),
        variance=input_folder("variance"),
        out=output_folder("html"),
    log:
        "logs/report.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../envs/adloco.yaml"
    shell:
        "adloco report --config {params.config:q} --runs results/runs"
        " --calibration results/calibration --variance {params.variance:q}"
        " --out {params.out:q} > {log:q} 2>&1"
