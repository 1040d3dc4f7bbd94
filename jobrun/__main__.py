from jobrun.admin.cli import main

main()
