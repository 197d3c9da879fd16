# Training: one job per run (an entry of `runs`) and seed, or, with
# `snakemake.train_jobs: run`, one job per run that trains its seeds one after
# the other (`adloco train --seed all`, as DVC's stage per run). Checkpoints go
# to results/<experiment>/checkpoints/{run}/seed{seed} and are deliberately not
# an output: Snakemake deletes the outputs of a failed job, and the checkpoints
# must survive so that re-running the job resumes instead of starting over.

if TRAIN_JOBS == "seed":

    rule train:
        input:
            manifest=MANIFEST,
            calibration=calibration_files(),
            base=base_input(),
        output:
            metrics=report(
                run_file("metrics.jsonl"),
                caption="../report/perplexity.rst",
                category="Training",
                subcategory="{run}",
                labels={"run": "{run}", "seed": "{seed}"},
            ),
            summary=run_file("summary.json"),
            final=directory(run_file("final")),
        wildcard_constraints:
            run=RUN_PATTERN,
            seed=r"\d+",
        params:
            config=config_file,
            settings=lambda wildcards: stage_params("train", wildcards),
            data=input_folder("manifest"),
            out=output_folder("summary"),
            calibration=input_folder("calibration"),
            base=base_arg(),
            checkpoints=str(paths.checkpoint_dir(EXPERIMENT, "{run}", "{seed}")),
            # Live TensorBoard curves, written while the job runs: no output.
            live=str(paths.live_dir(EXPERIMENT, "{run}", "{seed}")),
            launcher=train_launcher,
            threads_per_process=lambda wildcards, threads: max(1, threads // TRAIN_PROCESSES),
        log:
            f"{LOG_DIR}/train/{{run}}/seed{{seed}}.log",
        benchmark:
            f"{LOG_DIR}/benchmarks/train/{{run}}/seed{{seed}}.tsv"
        threads: train_threads
        resources:
            mem_mb=4000 + cpu_budget_mb(),
            runtime=24 * 60,
            gpu=train_gpu,
            gpu_model=cluster_gpu_model,
        conda:
            "../envs/adloco.yaml"
        shell:
            "{params.launcher}adloco train --config {params.config:q} --run-name {wildcards.run:q}"
            " --seed {wildcards.seed:q} --data {params.data:q} --calibration {params.calibration:q}"
            " {params.base:q}"
            " --out {params.out:q} --checkpoints {params.checkpoints:q} --live {params.live:q}"
            " --threads {params.threads_per_process} > {log:q} 2>&1"

else:

    # One rule per run, train_<run>: a rule's outputs cannot vary in number
    # with a wildcard, and runs have their own seeds. The runs with the most
    # seeds start first, so that the longest jobs do not come last.
    for _run in RUNS:

        rule:
            name:
                f"train_{_run}"
            input:
                manifest=MANIFEST,
                calibration=calibration_files(),
                base=base_input(),
            output:
                metrics=[
                    report(
                        path,
                        caption="../report/perplexity.rst",
                        category="Training",
                        subcategory=_run,
                        labels={"run": _run, "seed": seed},
                    )
                    for path, seed in zip(run_files("metrics.jsonl", _run), RUN_SEEDS[_run])
                ],
                summary=run_files("summary.json", _run),
                final=[directory(path) for path in run_files("final", _run)],
            params:
                config=config_file,
                settings=stage_params("train", {"run": _run}),
                run=_run,
                data=input_folder("manifest"),
                out=output_folder("summary", up=2),
                calibration=input_folder("calibration"),
                base=base_arg(),
                # seed<seed>/ of each, the folder a job per seed is given; no output.
                **run_folders(_run),
                launcher=train_launcher,
                threads_per_process=lambda wildcards, threads: max(1, threads // TRAIN_PROCESSES),
            log:
                f"{LOG_DIR}/train/{_run}.log",
            benchmark:
                f"{LOG_DIR}/benchmarks/train/{_run}.tsv"
            priority: len(RUN_SEEDS[_run])
            threads: train_threads
            resources:
                mem_mb=4000 + cpu_budget_mb(),
                runtime=24 * 60 * len(RUN_SEEDS[_run]),
                gpu=train_gpu,
                gpu_model=cluster_gpu_model,
            conda:
                "../envs/adloco.yaml"
            shell:
                "{params.launcher}adloco train --config {params.config:q} --run-name {params.run:q}"
                " --seed all --data {params.data:q} --calibration {params.calibration:q}"
                " {params.base:q}"
                " --out {params.out:q} --checkpoints {params.checkpoints:q} --live {params.live:q}"
                " --threads {params.threads_per_process} > {log:q} 2>&1"
