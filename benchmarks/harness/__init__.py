"""The PySpark benchmark harness: `python -m benchmarks.harness` (or `./run bench`).

Pipeline, one module per stage:
    spec        WorkloadSpec, RunSpec, CostRates: what a run is made of
    workload    seeded workload generation in Spark (one row per batch), parquet save/load
    execute     Spark tasks running brokers + pipelined idempotent producers on asyncio loops
    verify      read-back through broker.fetch in Spark tasks, audited record by record
    analysis    throughput, latency percentiles, object sizes, commit latency (Spark)
    cost        object-storage requests per GB vs. classic Kafka's cross-AZ replication
    baselines   raw PUT and raw SQLite insert rates on this machine, same run
    report      JSON, Markdown, PNG plots, printed summary, sweep comparison
    cli         argparse front end and orchestration
"""
