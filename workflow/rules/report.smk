# Report: every run's metrics and summary, the calibration, the variance
# analysis, the data's reference perplexities (its manifest), the base model
# (when the runs start from one) and the tuning record (when report.tuning
# names one) -> results/<experiment>/report/: index.html (figures embedded),
# summary.csv (one row per run and seed), curves.csv (perplexity per round),
# ladder.csv (time, tokens, communications and bytes to each target),
# regimes.csv (time-to-target ratios across clocks and bandwidths),
# noise_scale.csv (B_simple along the AdLoCo runs), claims.json (verdicts),
# figures/*.png and, in a tuning experiment (report.tuning_groups), tuning.json.
# Light work, so it runs where Snakemake runs, never as a cluster job.


localrules:
    report,


rule report:
    input:
        summaries=run_summaries(),
        metrics=run_metrics(),
        calibration=calibration_files(),
        variance=rules.variance.output,
        manifest=MANIFEST,
        base=base_input(),
        tuning=report_tuning_input(),
    output:
        html=report(
            f"{REPORT_DIR}/index.html",
            caption="../report/summary.rst",
            category="Report",
        ),
        summary=report(
            f"{REPORT_DIR}/summary.csv",
            caption="../report/summary.rst",
            category="Report",
        ),
        curves=report(
            f"{REPORT_DIR}/curves.csv",
            caption="../report/perplexity.rst",
            category="Report",
        ),
        claims=report(
            f"{REPORT_DIR}/claims.json",
            caption="../report/summary.rst",
            category="Report",
        ),
        ladder=report(
            f"{REPORT_DIR}/ladder.csv",
            caption="../report/summary.rst",
            category="Report",
        ),
        regimes=report(
            f"{REPORT_DIR}/regimes.csv",
            caption="../report/summary.rst",
            category="Report",
        ),
        noise=report(
            f"{REPORT_DIR}/noise_scale.csv",
            caption="../report/summary.rst",
            category="Report",
        ),
        # The numbers and curves DVC's commands show (dvc.yaml: metrics, plots).
        metrics=f"{REPORT_DIR}/metrics.json",
        median_curves=f"{REPORT_DIR}/median_curves.csv",
        tuning=report_tuning_output(),
        # A figure without data is left out, hence a folder, not a file list.
        figures=report(
            directory(f"{REPORT_DIR}/figures"),
            patterns=["{name}.png"],
            caption="../report/perplexity.rst",
            category="Report",
            labels={"figure": "{name}"},
        ),
    params:
        config=config_file,
        settings=stage_params("report"),
        variance=input_folder("variance"),
        # results/<experiment>/runs/<run>/seed<seed>/summary.json: three levels up.
        runs=input_folder("summaries", up=3),
        calibration=input_folder("calibration"),
        data=input_folder("manifest"),
        base=base_arg(),
        out=output_folder("html"),
    log:
        f"{LOG_DIR}/report.log",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        "../envs/adloco.yaml"
    shell:
        "adloco report --config {params.config:q} --runs {params.runs:q}"
        " --calibration {params.calibration:q} --variance {params.variance:q}"
        " --data {params.data:q} {params.base:q} --out {params.out:q} > {log:q} 2>&1"
