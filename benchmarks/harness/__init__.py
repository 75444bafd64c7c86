"""The PySpark benchmark harness: `python -m benchmarks.harness` (or `./run bench`).

Pipeline, one module per stage:
    spec        WorkloadSpec, RunSpec, CostRates: what a run is made of
    workload    seeded workload generation in Spark (one row per batch), parquet save/load
    execute     Spark tasks running brokers + pipelined idempotent producers on asyncio loops
    verify      read-back through broker.fetch in Spark tasks (readback), audited record by
                record (audit)
    consume     consumer groups reading while the producers run: a reader process beside each
                execution task (consumer), audited and measured in the driver (consume_report)
    analysis    throughput, latency percentiles, object sizes, commit latency (Spark)
    cost        object-storage requests per GB vs. classic Kafka's cross-AZ replication
    baselines   raw PUT and raw SQLite insert rates on this machine, same run
    report      JSON, Markdown, PNG plots, printed summary, sweep comparison
    consolidate the consolidation phase and its figures, before the second read-back
    run         one run through every stage (progress: its bars and phase times)
    options     the command line: workload spec, run options, sweep
    cli         the entry point: one run or a sweep, exit status

Examples:
    python -m benchmarks.harness                      # the default run, report in reports/<time>/
    python -m benchmarks.harness --producers 48 --rate-mb-s 50 --duration-s 60
    python -m benchmarks.harness --wal commit_interval_ms=100 buffer_max_bytes=4MiB
    python -m benchmarks.harness --sweep commit_interval_ms=100,250 buffer_max_bytes=1MiB,8MiB
    python -m benchmarks.harness --save-workload w.parquet      # then: --workload w.parquet
    python -m benchmarks.harness --s3-endpoint http://localhost:9000 --bucket bench
    python -m benchmarks.harness --tasks 1 --memory-coordinator
    python -m benchmarks.harness --consumer-groups 4             # fan-out: four groups read
"""
