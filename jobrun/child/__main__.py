from jobrun.child.runtime import main

main()
