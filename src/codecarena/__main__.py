from codecarena.cli import main

main()
