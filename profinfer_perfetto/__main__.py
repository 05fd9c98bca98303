from profinfer_perfetto.cli import main

main()
