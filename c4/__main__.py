from c4.cli import main

main()
