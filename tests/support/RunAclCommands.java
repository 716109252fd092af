import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.kafka.tools.AclCommand;

/**
 * Runs kafka-acls.sh's AclCommand for each line of standard input (its arguments, separated by tabs) in one JVM,
 * as the script would run it in one JVM each; a JVM's start takes seconds. A command that fails exits 1.
 */
public class RunAclCommands {
    public static void main(String[] args) throws Exception {
        BufferedReader lines = new BufferedReader(new InputStreamReader(System.in));
        for (String line = lines.readLine(); line != null; line = lines.readLine()) {
            if (!line.isEmpty()) {
                AclCommand.main(line.split("\t"));
            }
        }
    }
}
